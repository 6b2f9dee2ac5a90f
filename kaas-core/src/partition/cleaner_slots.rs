//! `log.cleaner.threads`: how many cleaning passes a broker runs at once, as Apache's cleaner
//! threads each clean one log at a time. A partition actor takes a slot to start a pass and
//! gives it back when the pass ends, however it ends (the slot is dropped with the pass); one
//! that finds none free looks again after `log.cleaner.backoff.ms`. The offset maps' memory and
//! the I/O buffers are shared among the slots (`CleanerConfig`), so `threads` bounds them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The broker's pass slots, shared by its partition actors.
#[derive(Debug, Clone, Default)]
pub struct CleanerSlots {
    busy: Arc<AtomicUsize>,
}

/// A running pass's slot, given back when dropped.
#[derive(Debug)]
pub struct CleanerSlot {
    busy: Arc<AtomicUsize>,
}

impl CleanerSlots {
    /// A slot, if fewer than `threads` passes run now.
    pub fn try_take(&self, threads: u32) -> Option<CleanerSlot> {
        let limit = threads as usize;
        let took =
            self.busy.fetch_update(Ordering::AcqRel, Ordering::Acquire, |busy| (busy < limit).then_some(busy + 1));
        took.ok().map(|_| CleanerSlot { busy: self.busy.clone() })
    }

    /// Passes running now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }
}

impl Drop for CleanerSlot {
    fn drop(&mut self) {
        let before = self.busy.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a slot given back was taken");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_threads_passes_hold_a_slot_and_a_dropped_one_frees_it() {
        let slots = CleanerSlots::default();
        let first = slots.try_take(2).expect("a free slot");
        let second = slots.clone().try_take(2).expect("a second free slot");
        assert!(slots.try_take(2).is_none(), "two threads, two passes");
        assert!(slots.try_take(3).is_some_and(|_| slots.busy() == 3), "a raised limit takes effect at once");
        drop(first);
        assert_eq!(slots.busy(), 1);
        assert!(slots.try_take(0).is_none(), "0 threads: no pass starts");
        drop(second);
        assert_eq!(slots.busy(), 0);
    }
}
