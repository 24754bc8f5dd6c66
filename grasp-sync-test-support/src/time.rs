//! `created_at` values for generated data sets.

/// Increasing `created_at` values, `per_second` events to a second, from
/// `base` on: with 2, `base, base+1, base+1, base+2, base+2, ...` (no second
/// holds more than two events, so no page of a paginated query ends inside a
/// crowded second).
#[derive(Clone, Debug)]
pub struct Timestamps {
    ticks: u64,
    per_second: u64,
}

impl Timestamps {
    /// Timestamps from `base` on, `per_second` (at least 1) to a second.
    pub fn new(base: u64, per_second: u64) -> Self {
        let per_second = per_second.max(1);
        Timestamps {
            ticks: base.saturating_mul(per_second),
            per_second,
        }
    }

    /// The next timestamp.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.ticks += 1;
        self.ticks / self.per_second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_to_a_second() {
        let mut at = Timestamps::new(100, 2);
        let seen: Vec<u64> = (0..5).map(|_| at.next()).collect();
        assert_eq!(seen, vec![100, 101, 101, 102, 102]);
    }

    #[test]
    fn one_to_a_second_counts_up() {
        let mut at = Timestamps::new(7, 1);
        assert_eq!((at.next(), at.next()), (8, 9));
    }
}
