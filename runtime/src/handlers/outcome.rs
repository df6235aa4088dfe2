//! What a handler's output answers ([`Outcome`]): a reply, the handler's
//! own error value, or nothing — for handlers that return their answer
//! (`Node::handle_result`, `Node::handle_async`) instead of calling
//! `Ctx::reply`.
//!
//! An error value travels as sitenet's error reply (`RemoteError`, its
//! reason a rendering of the value) with the value itself in the reply's
//! body (`node::error_detail`): no frame or header changed, and a caller
//! that does not ask for the value still gets a readable reason.

use bytes::Bytes;
use serde::Serialize;

use crate::message::Message;
use crate::node::error_detail;

/// How long a rendering of an error value in a reason may get (bytes).
const REASON_VALUE_MAX: usize = 256;

mod sealed {
    /// Only sitenet's types implement [`Outcome`](super::Outcome): what
    /// each answers is part of the protocol between handler and caller.
    pub trait Sealed {}
}

/// What a handler's output answers a request with — the output of a
/// [`Node::handle_result`](crate::Node::handle_result) handler or of a
/// [`Node::handle_async`](crate::Node::handle_async) future:
///
/// - a [`Message`] `R`: the reply (what `Ctx::reply` sends);
/// - `Result<T, E>`: `Ok(t)` answers as `t` does; `Err(e)` is the
///   handler's own error value, any `E: Serialize` — the caller of
///   [`RequestBuilder::or_error`](crate::RequestBuilder::or_error) gets it
///   back as its type and matches it, a plain `request` caller sees
///   [`RequestError::Remote`](crate::RequestError::Remote) with `e`
///   rendered (as JSON, at most 256 bytes) in its reason;
/// - `()` or `None`: nothing — the request was answered otherwise
///   (forwarded, or its [`Responder`](crate::Responder) taken), or it was
///   one-way; a request nobody answered gets "no reply" at once
///   ([`RequestError::NoReply`](crate::RequestError::NoReply));
/// - `Some(t)`: as `t`.
///
/// For a one-way message the output is dropped (an error value is logged
/// at debug level: there is nobody to tell). Sealed: these are the
/// answers a caller can tell apart.
pub trait Outcome: sealed::Sealed + Send + 'static {
    /// The answer, encoded (sitenet's own: not for implementations).
    #[doc(hidden)]
    fn into_answer(self) -> Answered;
}

/// An [`Outcome`] encoded, ready to be queued (the type is public only so
/// that the sealed trait can name it).
#[doc(hidden)]
pub struct Answered(pub(crate) Answer);

/// What an output answers.
pub(crate) enum Answer {
    /// Nothing.
    Nothing,
    /// A reply of type `type_id`, its header encoded.
    Reply { type_id: u32, header: Bytes },
    /// An error reply: `reason` and the body (`node::error_detail`).
    Error { reason: String, detail: Bytes },
    /// The output did not encode: answered as a plain failure, saying so.
    Unencodable(String),
}

impl Answered {
    /// True if this answers nothing.
    pub(crate) fn is_nothing(&self) -> bool {
        matches!(self.0, Answer::Nothing)
    }

    /// For a log line: what this answer is.
    pub(crate) fn describe(&self) -> &str {
        match &self.0 {
            Answer::Nothing => "nothing",
            Answer::Reply { .. } => "a reply",
            Answer::Error { reason, .. } | Answer::Unencodable(reason) => reason,
        }
    }
}

impl sealed::Sealed for () {}
impl Outcome for () {
    fn into_answer(self) -> Answered {
        Answered(Answer::Nothing)
    }
}

impl<M: Message> sealed::Sealed for M {}
impl<M: Message> Outcome for M {
    fn into_answer(self) -> Answered {
        Answered(match crate::message::encode_header(&self) {
            Ok(header) => Answer::Reply {
                type_id: M::ID,
                header,
            },
            Err(e) => Answer::Unencodable(format!(
                "the handler's reply (type {}) does not encode: {e}",
                M::ID
            )),
        })
    }
}

impl<T: Outcome> sealed::Sealed for Option<T> {}
impl<T: Outcome> Outcome for Option<T> {
    fn into_answer(self) -> Answered {
        match self {
            Some(t) => t.into_answer(),
            None => Answered(Answer::Nothing),
        }
    }
}

impl<T: Outcome, E: Serialize + Send + 'static> sealed::Sealed for Result<T, E> {}
impl<T: Outcome, E: Serialize + Send + 'static> Outcome for Result<T, E> {
    fn into_answer(self) -> Answered {
        match self {
            Ok(t) => t.into_answer(),
            Err(e) => error_answer(&e),
        }
    }
}

/// The error reply carrying the handler's error value `e`: its rendering
/// as the reason, its MessagePack encoding (named fields, so that a
/// caller whose version of the type lacks a field skips it) as the
/// detail.
pub(crate) fn error_answer<E: Serialize + ?Sized>(e: &E) -> Answered {
    let mut detail = vec![error_detail::HANDLER];
    if let Err(err) = rmp_serde::encode::write_named(&mut detail, e) {
        return Answered(Answer::Unencodable(format!(
            "the handler's error value ({}) does not encode: {err}",
            std::any::type_name::<E>()
        )));
    }
    Answered(Answer::Error {
        reason: format!("the handler returned an error: {}", render(e)),
        detail: detail.into(),
    })
}

/// `e` as JSON, cut to [`REASON_VALUE_MAX`] bytes, or its type's name if
/// it has no JSON form (a map with keys that are not strings, say).
fn render<E: Serialize + ?Sized>(e: &E) -> String {
    match serde_json::to_string(e) {
        Ok(mut text) => {
            if text.len() > REASON_VALUE_MAX {
                let mut cut = REASON_VALUE_MAX;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push('…');
            }
            text
        }
        Err(_) => std::any::type_name::<E>().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Refused {
        NotFound { key: String },
        Full,
    }

    #[test]
    fn an_error_value_is_rendered_in_the_reason_and_encoded_in_the_detail() {
        let a = Err::<(), _>(Refused::NotFound { key: "k".into() }).into_answer();
        let Answer::Error { reason, detail } = a.0 else {
            panic!("an error reply")
        };
        assert_eq!(
            reason,
            r#"the handler returned an error: {"NotFound":{"key":"k"}}"#
        );
        assert_eq!(detail[0], error_detail::HANDLER);
        let back: Refused = rmp_serde::from_slice(&detail[1..]).unwrap();
        assert_eq!(back, Refused::NotFound { key: "k".into() });
    }

    #[test]
    fn a_long_rendering_is_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let Answer::Error { reason, .. } = Err::<(), _>(long).into_answer().0 else {
            panic!("an error reply")
        };
        assert!(reason.len() < REASON_VALUE_MAX + 64, "{}", reason.len());
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn nothing_answers_nothing() {
        assert!(().into_answer().is_nothing());
        assert!(None::<()>.into_answer().is_nothing());
        assert!(Ok::<_, String>(()).into_answer().is_nothing());
        assert!(!Err::<(), _>(Refused::Full).into_answer().is_nothing());
    }
}
