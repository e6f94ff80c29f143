//! Elastic work inside elastic work. `Elastic::spawn` runs a future as a [`Paced`](crate::Paced)
//! one, and that future may itself drive paced streams, futures or a `Pacer` loop of the same
//! `Elastic`. Both holding grants would count the same CPU twice and, with the holder cap, leave
//! the inner one waiting for the slot the outer one holds. So the outer poll notes on its thread
//! which `Elastic` it paces for; an adapter of the same `Elastic` that takes a grant inside it
//! asks it to hand pacing over, and after that poll the outer one settles its grant and only
//! marks its polls as elastic work: the inner adapters pace (and yield at the quantum) as they
//! would on their own.

use std::cell::Cell;

thread_local! {
    /// The `Elastic` (the address of its own class) whose paced poll runs on this thread now
    /// (0: none), and whether an adapter of the same `Elastic` inside that poll took a grant.
    static OUTER: Cell<(usize, bool)> = const { Cell::new((0, false)) };
}

/// What a paced poll replaces while it runs, to restore after it.
#[derive(Clone, Copy)]
pub(crate) struct Outer((usize, bool));

/// A paced poll for the `Elastic` at `root` starts on this thread.
#[inline]
pub(crate) fn enter(root: usize) -> Outer {
    Outer(OUTER.replace((root, false)))
}

/// It ends: the poll around it (if any) is back in force. Returns whether an adapter of the same
/// `Elastic` took a grant inside it.
#[inline]
pub(crate) fn leave(outer: Outer) -> bool {
    OUTER.replace(outer.0).1
}

/// An adapter of the `Elastic` at `root` takes a grant: a paced poll of the same `Elastic`
/// around it hands pacing over.
#[inline]
pub(crate) fn take_over(root: usize) {
    OUTER.with(|o| {
        let (outer, _) = o.get();
        if outer == root {
            o.set((outer, true));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_elastic_takes_over_and_nesting_restores() {
        assert!(!leave(enter(1)), "no adapter inside");
        let outer = enter(1);
        take_over(2);
        let inner = enter(2);
        take_over(2);
        assert!(
            leave(inner),
            "the inner poll of the same Elastic was taken over"
        );
        assert!(!leave(outer), "another Elastic's grant does not take over");
        let outer = enter(3);
        take_over(3);
        assert!(leave(outer));
        take_over(3);
        assert!(!leave(enter(3)), "nothing outside a paced poll");
    }
}
