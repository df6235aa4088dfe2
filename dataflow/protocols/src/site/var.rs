//! Dataflow variables: one manager (at the home) and a proxy on each site
//! that refers to the variable.
//!
//! A bind goes to the manager; the first one wins and the binding goes to
//! every site that registered (a site registers when it first waits or
//! binds: waiting is a push, never a poll). A bind to an equal value
//! succeeds, to a different one fails with `Conflict`, wherever it is
//! tried. A by-need variable's producer runs when the first wait reaches
//! the manager.

use sitenet_protocols::SiteId;

use super::{HomeState, ProxyState, Site};
use crate::entity::{EntityId, Kind, OpId, Value};
use crate::outcome::{Action, Answer, FailMode, OpError};
use crate::wire::{Refused, Wire};

/// The manager's side.
#[derive(Debug)]
pub(super) struct VarHome {
    pub(super) value: Option<Value>,
    /// Sites to send the binding to.
    pub(super) registered: Vec<SiteId>,
    /// Operations on this site waiting for the binding.
    waiters: Vec<OpId>,
    by_need: bool,
    needed: bool,
}

impl VarHome {
    pub(super) fn new(by_need: bool) -> VarHome {
        VarHome {
            value: None,
            registered: Vec::new(),
            waiters: Vec::new(),
            by_need,
            needed: false,
        }
    }
}

/// A proxy's side.
#[derive(Debug, Default)]
pub(super) struct VarProxy {
    pub(super) value: Option<Value>,
    registered: bool,
    waiters: Vec<OpId>,
}

impl Site {
    fn var_home(&mut self, var: EntityId) -> Option<&mut VarHome> {
        match self.homes.get_mut(&var.serial) {
            Some(h) if h.kind == var.kind => match &mut h.state {
                HomeState::Var(v) => Some(v),
                _ => None,
            },
            _ => None,
        }
    }

    fn var_proxy(&mut self, var: EntityId) -> Option<&mut VarProxy> {
        match self.proxies.get_mut(&var).map(|p| &mut p.state) {
            Some(ProxyState::Var(v)) => Some(v),
            _ => None,
        }
    }

    /// A clone of `v` with its own holds, for an answer.
    fn answer_value(&mut self, v: &Value) -> Value {
        for &r in &v.refs {
            self.acquire(r);
        }
        v.clone()
    }

    /// A `Register` for `var` may be lost (handed back as maybe
    /// delivered): sent again while the proxy still has no value (a home
    /// registers a site once however often it asks).
    pub(super) fn var_register_again(&mut self, var: EntityId) {
        if self.is_dead(var.home) {
            return;
        }
        if self.var_proxy(var).is_some_and(|v| v.value.is_none()) {
            self.post(var.home, Wire::Register { var });
        }
    }

    pub(super) fn var_wait(&mut self, op: OpId, var: EntityId, mode: FailMode) {
        if var.home == self.me {
            let Some(v) = self.var_home(var) else {
                self.finish(op, Err(OpError::Gone));
                return;
            };
            if let Some(value) = v.value.clone() {
                let value = self.answer_value(&value);
                self.finish(op, Ok(Answer::Value(value)));
                return;
            }
            v.waiters.push(op);
            self.trigger_need(var);
            return;
        }
        // A bound proxy answers even if the home is gone: the binding is
        // final.
        let bound = self.var_proxy(var).and_then(|v| v.value.clone());
        if let Some(value) = bound {
            let value = self.answer_value(&value);
            self.finish(op, Ok(Answer::Value(value)));
            return;
        }
        if let Some(err) = self.refused_by_fault(var, mode) {
            self.finish(op, Err(err));
            return;
        }
        let v = self.var_proxy(var).expect("the operation holds a proxy");
        v.waiters.push(op);
        if !v.registered {
            v.registered = true;
            self.post(var.home, Wire::Register { var });
        }
    }

    fn trigger_need(&mut self, var: EntityId) {
        if let Some(v) = self.var_home(var) {
            if v.by_need && !v.needed {
                v.needed = true;
                self.actions.push_back(Action::Need { var });
            }
        }
    }

    pub(super) fn var_bind(&mut self, op: OpId, var: EntityId, value: Value, mode: FailMode) {
        if var.home == self.me {
            let outcome = self.bind_here(var, value, None);
            self.finish(op, outcome);
            return;
        }
        let bound = self.var_proxy(var).and_then(|v| v.value.clone());
        if let Some(old) = bound {
            let same = old == value;
            self.release_value(&value);
            let outcome = if same {
                Ok(Answer::Done)
            } else {
                Err(OpError::Conflict)
            };
            self.finish(op, outcome);
            return;
        }
        if let Some(err) = self.refused_by_fault(var, mode) {
            self.release_value(&value);
            self.finish(op, Err(err));
            return;
        }
        // The manager registers a binder: the binding comes back to it.
        if let Some(v) = self.var_proxy(var) {
            v.registered = true;
        }
        self.post(var.home, Wire::Bind { var, op, value });
    }

    /// Binds a variable made here, from this site.
    pub(super) fn bind_local(&mut self, var: EntityId, value: Value) -> Result<Answer, OpError> {
        self.bind_here(var, value, None)
    }

    /// Binds a variable made here (from this site, or for `from`'s
    /// `Bind`, whom the binding then reaches as a registered site).
    fn bind_here(
        &mut self,
        var: EntityId,
        value: Value,
        from: Option<SiteId>,
    ) -> Result<Answer, OpError> {
        let Some(v) = self.var_home(var) else {
            self.release_value(&value);
            return Err(OpError::Gone);
        };
        if let Some(from) = from {
            if !v.registered.contains(&from) {
                v.registered.push(from);
            }
        }
        if let Some(old) = v.value.clone() {
            let same = old == value;
            self.release_value(&value);
            // A binder registers: one that came late gets the binding too
            // (it binds only with no value at hand, even if it was
            // registered for an earlier proxy).
            if let Some(to) = from {
                self.send_binding(to, var, &old);
            }
            return if same {
                Ok(Answer::Done)
            } else {
                Err(OpError::Conflict)
            };
        }
        v.value = Some(value.clone());
        let waiters = std::mem::take(&mut v.waiters);
        let registered = v.registered.clone();
        // The variable holds the value (the handles `value` came with);
        // each answer and message gets its own.
        for op in waiters {
            let answer = self.answer_value(&value);
            self.finish(op, Ok(Answer::Value(answer)));
        }
        for site in registered {
            self.send_binding(site, var, &value);
        }
        Ok(Answer::Done)
    }

    /// Sends `site` the binding of `var` (made here), and registers it for
    /// the unbound variables made here that the binding names: a site
    /// reading a stream gets each cell pushed as it is bound, with no
    /// round trip per cell. Bound ones among them are sent too, even to a
    /// site registered for them already: its proxy may have gone (its
    /// `Clean` on the way) and the receiver makes a new one that counts
    /// on this message for the value.
    fn send_binding(&mut self, site: SiteId, var: EntityId, value: &Value) {
        let first = var;
        let mut todo = vec![(var, value.clone())];
        // Bound variables sent so far (a value may name one twice, or
        // itself); empty, and so free, on a stream's usual push.
        let mut sent = std::collections::HashSet::new();
        while let Some((var, value)) = todo.pop() {
            for &r in value.refs.iter().rev() {
                if r.home != self.me || r.kind != Kind::Var || r == first {
                    continue;
                }
                let Some(v) = self.var_home(r) else { continue };
                if !v.registered.contains(&site) {
                    v.registered.push(site);
                }
                if let Some(next) = v.value.clone() {
                    if sent.insert(r) {
                        todo.push((r, next));
                    }
                }
            }
            let copy = self.answer_value(&value);
            self.post(site, Wire::Bound { var, value: copy });
        }
    }

    pub(super) fn var_on_register(&mut self, from: SiteId, var: EntityId) {
        if var.home != self.me || self.is_dead(from) {
            return;
        }
        let Some(v) = self.var_home(var) else {
            self.post(from, Wire::Gone { entity: var });
            return;
        };
        if !v.registered.contains(&from) {
            v.registered.push(from);
        }
        if let Some(value) = v.value.clone() {
            self.send_binding(from, var, &value);
        }
        self.trigger_need(var);
    }

    pub(super) fn var_on_bind(&mut self, from: SiteId, var: EntityId, op: OpId, value: Value) {
        if var.home != self.me {
            self.release_value(&value);
            return;
        }
        let refused = match self.bind_here(var, value, Some(from)) {
            Ok(_) => None,
            Err(OpError::Conflict) => Some(Refused::Conflict),
            Err(_) => Some(Refused::Gone),
        };
        self.post(from, Wire::BindAck { var, op, refused });
    }

    pub(super) fn var_on_bind_ack(&mut self, op: OpId, refused: Option<Refused>) {
        let outcome = match refused {
            None => Ok(Answer::Done),
            Some(Refused::Conflict) => Err(OpError::Conflict),
            Some(Refused::Gone) => Err(OpError::Gone),
        };
        self.finish(op, outcome);
    }

    pub(super) fn var_on_bound(&mut self, from: SiteId, var: EntityId, value: Value) {
        if from != var.home {
            self.release_value(&value);
            return;
        }
        let Some(v) = self.var_proxy(var) else {
            // Nothing here refers to it any more.
            self.release_value(&value);
            return;
        };
        if v.value.is_some() {
            self.release_value(&value);
            return;
        }
        v.value = Some(value.clone());
        let waiters = std::mem::take(&mut v.waiters);
        for op in waiters {
            let answer = self.answer_value(&value);
            self.finish(op, Ok(Answer::Value(answer)));
        }
        // The home registered this site for the variables it made that
        // the binding names (`send_binding`).
        for &r in &value.refs {
            if r.home == from && r.kind == Kind::Var {
                if let Some(p) = self.var_proxy(r) {
                    p.registered = true;
                }
            }
        }
    }
}
