//! Reading a command line the way both binaries do: `--help` and
//! `--version` print and exit 0, a mistake is one line naming `--help` and
//! exit 2.

use std::process::ExitCode;

/// The parsed command line of the binary `name`, or the exit code to end
/// with after printing help, the version or the mistake.
pub fn parse_or_exit<A: clap::Parser>(name: &str) -> Result<A, ExitCode> {
    match A::try_parse() {
        Ok(args) => Ok(args),
        Err(error) if !error.use_stderr() => {
            // --help, --version
            print!("{error}");
            Err(ExitCode::SUCCESS)
        }
        Err(error) => {
            let rendered = error.to_string();
            let line = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("{line} (see {name} --help)");
            Err(ExitCode::from(2))
        }
    }
}
