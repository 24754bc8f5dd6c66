//! Whether the installed git can pin a clone URL's host to its checked address.
//!
//! Purgatory makes git connect to the address it checked with
//! `-c http.curloptResolve=<host>:<port>:<address>`. git only knows that setting from
//! version 2.37 on; older versions ignore it silently and resolve the name themselves,
//! so a name that resolves to a public address when checked and to `127.0.0.1` a moment
//! later (DNS rebinding) would reach local services. [`git_version_verdict`] reads
//! `git --version` and says whether to go ahead, warn, or refuse to start.

/// A git release, as `git --version` prints it (`git version 2.39.2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GitVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level (0 when not printed).
    pub patch: u32,
}

impl std::fmt::Display for GitVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The first git release that honours `http.curloptResolve`: 2.37.0.
pub const MIN_GIT_FOR_DNS_PIN: GitVersion = GitVersion {
    major: 2,
    minor: 37,
    patch: 0,
};

/// What to do about the installed git (see [`git_version_verdict`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitVersionVerdict {
    /// git pins hosts: go ahead.
    Pins(GitVersion),
    /// git is too old (or its version unreadable) and the operator did not allow it:
    /// refuse to start.
    Refuse(Option<GitVersion>),
    /// git is too old (or its version unreadable) and the operator allowed it: start,
    /// warning loudly that clone URL hosts are resolved by git itself.
    Warn(Option<GitVersion>),
}

/// Reads the version out of `git --version`'s output (`git version 2.34.1`,
/// `git version 2.39.2.windows.1`, `git version 2.37.1 (Apple Git-137.1)`); `None` when
/// it is not that.
pub fn parse_git_version(output: &str) -> Option<GitVersion> {
    let rest = output.trim().strip_prefix("git version ")?;
    let number = rest.split_whitespace().next()?;
    let mut parts = number.split('.');
    let mut next = |required: bool| match parts.next().map(str::parse::<u32>) {
        Some(Ok(value)) => Some(value),
        None | Some(Err(_)) if !required => Some(0),
        _ => None,
    };
    Some(GitVersion {
        major: next(true)?,
        minor: next(true)?,
        patch: next(false)?,
    })
}

/// Whether purgatory may start with the git whose `git --version` printed `output`:
/// [`GitVersionVerdict::Pins`] from [`MIN_GIT_FOR_DNS_PIN`] on; below it (or when the
/// version cannot be read) [`GitVersionVerdict::Warn`] if the operator allows an old
/// git (`allow_old_git`), [`GitVersionVerdict::Refuse`] otherwise.
pub fn git_version_verdict(output: &str, allow_old_git: bool) -> GitVersionVerdict {
    let version = parse_git_version(output);
    match version {
        Some(version) if version >= MIN_GIT_FOR_DNS_PIN => GitVersionVerdict::Pins(version),
        _ if allow_old_git => GitVersionVerdict::Warn(version),
        _ => GitVersionVerdict::Refuse(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> GitVersion {
        GitVersion {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn versions_are_read_from_what_git_prints() {
        assert_eq!(parse_git_version("git version 2.34.1\n"), Some(v(2, 34, 1)));
        assert_eq!(
            parse_git_version("git version 2.39.2.windows.1"),
            Some(v(2, 39, 2))
        );
        assert_eq!(
            parse_git_version("git version 2.37.1 (Apple Git-137.1)"),
            Some(v(2, 37, 1))
        );
        assert_eq!(parse_git_version("git version 3.0"), Some(v(3, 0, 0)));
        assert_eq!(
            parse_git_version("git version 2.45.0.rc0"),
            Some(v(2, 45, 0))
        );
        assert_eq!(parse_git_version("git version two.1"), None);
        assert_eq!(parse_git_version("hub version 2.14.2"), None);
        assert_eq!(parse_git_version(""), None);
    }

    #[test]
    fn git_older_than_2_37_is_refused_unless_allowed() {
        let old = "git version 2.34.1";
        assert_eq!(
            git_version_verdict(old, false),
            GitVersionVerdict::Refuse(Some(v(2, 34, 1)))
        );
        assert_eq!(
            git_version_verdict(old, true),
            GitVersionVerdict::Warn(Some(v(2, 34, 1)))
        );
        assert_eq!(
            git_version_verdict("git version 2.36.99", false),
            GitVersionVerdict::Refuse(Some(v(2, 36, 99)))
        );
        assert_eq!(
            git_version_verdict("git version 2.37.0", false),
            GitVersionVerdict::Pins(v(2, 37, 0))
        );
        assert_eq!(
            git_version_verdict("git version 2.43.0", false),
            GitVersionVerdict::Pins(v(2, 43, 0))
        );
        assert_eq!(
            git_version_verdict("garbage", false),
            GitVersionVerdict::Refuse(None)
        );
        assert_eq!(
            git_version_verdict("garbage", true),
            GitVersionVerdict::Warn(None)
        );
    }
}
