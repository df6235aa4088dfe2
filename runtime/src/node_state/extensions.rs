//! A node's extensions: one value per type that a layer above sitenet (a
//! language runtime's distribution layer) keeps with the node and finds
//! from any handle of it (`Node::extension`, `Node::extension_or_init`).
//! Made at most once per node and type, never under the table's lock, and
//! dropped when the node stops ([`Extensions::close`]).

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// One extension, type-erased.
type Value = Arc<dyn Any + Send + Sync>;

/// An extension's slot: made once, by the first caller, outside the
/// table's lock (later callers of the same type wait for it).
type Slot = Arc<OnceLock<Value>>;

thread_local! {
    /// The slots this thread is making a value for, innermost last: an
    /// init that asks for its own type finds its slot here and panics,
    /// where it would wait for itself for ever.
    static MAKING: RefCell<Vec<*const OnceLock<Value>>> = const { RefCell::new(Vec::new()) };
}

/// The node's extensions, by type.
pub(crate) struct Extensions {
    /// `None` once the node stopped: the values were dropped, and none is
    /// kept again.
    slots: Mutex<Option<HashMap<TypeId, Slot>>>,
}

impl Default for Extensions {
    fn default() -> Self {
        Self {
            slots: Mutex::new(Some(HashMap::new())),
        }
    }
}

impl Extensions {
    /// The extension of type `T`, if one was made (and the node has not
    /// stopped).
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let v = self
            .slots
            .lock()
            .as_ref()?
            .get(&TypeId::of::<T>())?
            .get()?
            .clone();
        v.downcast().ok()
    }

    /// The extension of type `T`, made by `init` if there is none: at most
    /// once, however many threads ask at once (the others wait for the
    /// first one's `init`). `init` runs without the table's lock, so it may
    /// read or make other extensions; asking for `T` itself from `init`
    /// panics (it would wait for itself). Once the node stopped, `init`'s
    /// value is returned and not kept.
    pub(crate) fn get_or_init<T: Send + Sync + 'static>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let slot = {
            let mut slots = self.slots.lock();
            match slots.as_mut() {
                Some(slots) => slots.entry(TypeId::of::<T>()).or_default().clone(),
                None => {
                    drop(slots);
                    return Arc::new(init());
                }
            }
        };
        let v = match slot.get() {
            Some(v) => v.clone(),
            None => {
                let _making = Making::enter::<T>(&slot);
                slot.get_or_init(|| Arc::new(init()) as Value).clone()
            }
        };
        v.downcast()
            .unwrap_or_else(|_| unreachable!("an extension is kept under its own type's id"))
    }

    /// Drops every extension (outside the lock, so that their `Drop` may
    /// use the node) and keeps none from now on: the node stopped.
    pub(crate) fn close(&self) {
        let slots = self.slots.lock().take();
        drop(slots);
    }
}

/// This thread makes the value of a slot (see [`MAKING`]), until dropped
/// (also on unwinding, if `init` panics).
struct Making;

impl Making {
    fn enter<T>(slot: &Slot) -> Self {
        let p = Arc::as_ptr(slot);
        MAKING.with(|m| {
            let mut m = m.borrow_mut();
            if m.contains(&p) {
                drop(m);
                panic!(
                    "Node::extension_or_init::<{}> was called from the init of that same \
                     extension, which would wait for itself: make the value without asking \
                     for it, or ask for it after init returns",
                    std::any::type_name::<T>()
                );
            }
            m.push(p);
        });
        Making
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        MAKING.with(|m| {
            m.borrow_mut().pop();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn an_extension_is_made_once_and_found_by_type() {
        let x = Extensions::default();
        assert!(x.get::<u32>().is_none());
        assert_eq!(*x.get_or_init(|| 7u32), 7);
        assert_eq!(*x.get_or_init(|| 8u32), 7);
        assert_eq!(x.get::<u32>().as_deref(), Some(&7));
        assert!(x.get::<u64>().is_none());
    }

    #[test]
    fn an_init_may_make_another_extension() {
        let x = Extensions::default();
        let v = x.get_or_init(|| *x.get_or_init(|| 2u8) as u16 + 1);
        assert_eq!((*v, x.get::<u8>().as_deref()), (3, Some(&2)));
    }

    #[test]
    #[should_panic(expected = "would wait for itself")]
    fn an_init_asking_for_its_own_type_panics_instead_of_waiting_for_ever() {
        let x = Extensions::default();
        x.get_or_init(|| *x.get_or_init(|| 1u8) + 1);
    }

    #[test]
    fn a_panicking_init_leaves_the_slot_to_the_next_caller() {
        let x = Extensions::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            x.get_or_init::<u8>(|| panic!("init failed"))
        }));
        assert!(r.is_err());
        assert_eq!(*x.get_or_init(|| 5u8), 5);
    }

    #[test]
    fn closing_drops_the_extensions_and_keeps_none_after() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let x = Extensions::default();
        x.get_or_init(|| Counted);
        x.close();
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        assert!(x.get::<Counted>().is_none());
        drop(x.get_or_init(|| Counted)); // made, returned, not kept
        assert_eq!(DROPS.load(Ordering::SeqCst), 2);
        assert!(x.get::<Counted>().is_none());
    }
}
