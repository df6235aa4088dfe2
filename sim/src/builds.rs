//! Which build each simulated site runs: a cluster in the middle of a
//! rolling upgrade (docs/protocol.md §4.11).

use sitenet_protocols::base::site::SiteId;

/// What the build of the site `id` speaks: a cluster in the middle of a
/// rolling upgrade. One site in eight lacks packed frames, one in eight
/// the graceful-leave frame, one in eight the waiting line (its peers
/// refuse it at their hard limit, as before the line), the rest speak
/// this build's whole set; a
/// restarted site (a new id) may come back as another build. Derived from
/// the id, which the run's generator drew, so it takes no draw of its own.
/// Every checker then holds across channels that agreed different
/// capabilities (docs/protocol.md §4.11).
pub(crate) fn mixed_build(id: SiteId) -> sitenet_protocols::wire::version::Speaks {
    use sitenet_protocols::wire::version::{Capabilities, Speaks};
    let caps = match (id.0 >> 1) & 7 {
        0 => Capabilities::ALL.without(Capabilities::PACKED),
        1 => Capabilities::ALL.without(Capabilities::LEAVING),
        2 => Capabilities::ALL.without(Capabilities::LINE),
        _ => Capabilities::ALL,
    };
    Speaks {
        caps,
        ..Speaks::CURRENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sitenet_protocols::wire::version::Capabilities;

    /// A simulated cluster holds every build: sites lacking packed frames,
    /// the leave frame or the line, and current ones, in about the stated
    /// shares.
    #[test]
    fn a_simulated_cluster_mixes_builds() {
        let caps: Vec<Capabilities> = (0..800u128)
            .map(|i| mixed_build(SiteId(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)).caps)
            .collect();
        let count = |c: Capabilities| caps.iter().filter(|x| **x == c).count();
        let no_packed = count(Capabilities::ALL.without(Capabilities::PACKED));
        let no_leaving = count(Capabilities::ALL.without(Capabilities::LEAVING));
        let no_line = count(Capabilities::ALL.without(Capabilities::LINE));
        let current = count(Capabilities::ALL);
        assert_eq!(no_packed + no_leaving + no_line + current, 800);
        assert!((50..150).contains(&no_packed), "{no_packed}");
        assert!((50..150).contains(&no_leaving), "{no_leaving}");
        assert!((50..150).contains(&no_line), "{no_line}");
    }
}
