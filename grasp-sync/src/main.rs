//! `grasp-sync`: GRASP-02 proactive sync as a sidecar next to a relay you
//! already run. See `grasp-sync --help`.

fn main() -> std::process::ExitCode {
    grasp_sync::main()
}
