//! The panic boundary: every exported function's body runs inside [`status_call`] or
//! [`value_call`], which never let a panic reach C.
//!
//! A surface says once, in its [`Surface`] implementation, what its codes are and how a
//! failure is recorded (a last-error text, a log line, both); the calls here do the rest.
//! Recording formats text and may log, so it runs behind a second `catch_unwind`: a panic
//! there still ends in the surface's [`Surface::PANICKED`] code.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// One C surface: its result codes and how it records a failure.
///
/// Implemented by a unit type per library (libweft, libnccl.so.2, the net plugin), so that
/// the codes and texts a C caller sees are defined in that library's crate.
pub trait Surface {
    /// The result code C receives (`weft_status`, `ncclResult_t`).
    type Code: Copy;
    /// The error an entry point's body returns.
    type Error;
    /// The code for success.
    const SUCCESS: Self::Code;
    /// The code for a caught panic: the surface's "internal error".
    const PANICKED: Self::Code;

    /// After a body succeeded (libweft clears its last error here). Does nothing by default.
    fn succeeded(entry: &str) {
        let _ = entry;
    }

    /// Records `error`, returned by entry point `entry`, and gives its code.
    fn failed(entry: &str, error: Self::Error) -> Self::Code;

    /// Records that entry point `entry` panicked with `message`; [`Self::PANICKED`] follows.
    fn panicked(entry: &str, message: &str);
}

/// A caught panic.
pub struct Panic {
    payload: Box<dyn Any + Send>,
}

impl Panic {
    /// The panic's message: `panic!`'s text, or "(no message)" when the payload is not a
    /// string (`std::panic::panic_any` with another type).
    pub fn message(&self) -> &str {
        self.payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| self.payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)")
    }
}

impl fmt::Debug for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Panic")
            .field("message", &self.message())
            .finish()
    }
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// Runs `body`, catching a panic. The body is taken as unwind-safe: whatever it left half
/// done is state behind the C surface, which the surface already treats as possibly broken
/// after an error (its locks recover from poisoning).
pub fn catch<T>(body: impl FnOnce() -> T) -> Result<T, Panic> {
    catch_unwind(AssertUnwindSafe(body)).map_err(|payload| Panic { payload })
}

/// Runs the body of entry point `entry` and returns its code: [`Surface::SUCCESS`] (after
/// [`Surface::succeeded`]), the code [`Surface::failed`] gives for its error, or
/// [`Surface::PANICKED`] when it panicked (after [`Surface::panicked`] recorded the message).
pub fn status_call<S: Surface>(
    entry: &str,
    body: impl FnOnce() -> Result<(), S::Error>,
) -> S::Code {
    let outcome = catch(body);
    catch(|| match outcome {
        Ok(Ok(())) => {
            S::succeeded(entry);
            S::SUCCESS
        }
        Ok(Err(error)) => S::failed(entry, error),
        Err(panic) => {
            S::panicked(entry, panic.message());
            S::PANICKED
        }
    })
    .unwrap_or(S::PANICKED)
}

/// Runs the body of entry point `entry` that returns a value rather than a code (a static
/// text, a version number): `fallback` if it panics, the panic recorded by
/// [`Surface::panicked`]. Records nothing otherwise, so that reading a failure's text or a
/// code's description does not erase the failure.
pub fn value_call<S: Surface, T>(entry: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch(body) {
        Ok(value) => value,
        Err(panic) => {
            // A panic while recording loses the record, not the call.
            let _ = catch(|| S::panicked(entry, panic.message()));
            fallback
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// What the test surface recorded on this thread.
        static RECORDED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn record(text: String) {
        RECORDED.with(|r| r.borrow_mut().push(text));
    }

    fn recorded() -> Vec<String> {
        RECORDED.with(|r| r.borrow_mut().drain(..).collect())
    }

    /// Codes as a C enum would have them; errors carry their code.
    struct TestSurface;

    impl Surface for TestSurface {
        type Code = i32;
        type Error = (i32, &'static str);
        const SUCCESS: i32 = 0;
        const PANICKED: i32 = 3;

        fn succeeded(entry: &str) {
            record(format!("{entry}: ok"));
        }

        fn failed(entry: &str, (code, text): (i32, &'static str)) -> i32 {
            if text == "panic while recording" {
                panic!("recording {entry} failed");
            }
            record(format!("{entry}: {text}"));
            code
        }

        fn panicked(entry: &str, message: &str) {
            if message == "panic again" {
                panic!("recording the panic of {entry} failed");
            }
            record(format!("{entry}: panicked: {message}"));
        }
    }

    /// A surface that keeps `succeeded`'s default.
    struct Quiet;

    impl Surface for Quiet {
        type Code = u32;
        type Error = u32;
        const SUCCESS: u32 = 0;
        const PANICKED: u32 = 9;

        fn failed(_entry: &str, error: u32) -> u32 {
            error
        }

        fn panicked(_entry: &str, _message: &str) {}
    }

    #[test]
    fn success_error_and_panic_give_the_surfaces_codes() {
        assert_eq!(status_call::<TestSurface>("f", || Ok(())), 0);
        assert_eq!(recorded(), ["f: ok"]);
        assert_eq!(status_call::<TestSurface>("g", || Err((5, "bad"))), 5);
        assert_eq!(recorded(), ["g: bad"]);
        assert_eq!(
            status_call::<TestSurface>("h", || panic!("value {} exceeds 3", 9)),
            3
        );
        assert_eq!(recorded(), ["h: panicked: value 9 exceeds 3"]);
        assert_eq!(status_call::<Quiet>("q", || Ok(())), 0);
        assert_eq!(status_call::<Quiet>("q", || Err(7)), 7);
    }

    #[test]
    fn an_out_of_bounds_index_does_not_escape() {
        let code = status_call::<TestSurface>("index", || {
            let v: Vec<u8> = Vec::new();
            if v[usize::from(v.is_empty())] == 0 {
                return Ok(());
            }
            Ok(())
        });
        assert_eq!(code, 3);
        let r = recorded();
        assert!(
            r[0].starts_with("index: panicked: index out of bounds"),
            "{r:?}"
        );
    }

    #[test]
    fn a_panic_while_recording_is_caught_too() {
        let code = status_call::<TestSurface>("r", || Err((5, "panic while recording")));
        assert_eq!(code, 3);
        assert_eq!(status_call::<TestSurface>("r", || panic!("panic again")), 3);
        assert!(recorded().is_empty());
        assert_eq!(
            value_call::<TestSurface, _>("v", 1, || panic!("panic again")),
            1
        );
    }

    #[test]
    fn value_calls_record_only_panics() {
        assert_eq!(value_call::<TestSurface, _>("v", 0, || 42), 42);
        assert!(recorded().is_empty());
        assert_eq!(value_call::<TestSurface, _>("v", 7, || panic!("boom")), 7);
        assert_eq!(recorded(), ["v: panicked: boom"]);
    }

    #[test]
    fn panic_messages_from_literals_strings_and_other_payloads() {
        let p = catch(|| panic!("literal")).unwrap_err();
        assert_eq!(p.message(), "literal");
        let p = catch(|| panic!("owned {}", 7)).unwrap_err();
        assert_eq!(p.message(), "owned 7");
        assert_eq!(p.to_string(), "owned 7");
        let p = catch(|| std::panic::panic_any(5u8)).unwrap_err();
        assert_eq!(p.message(), "(no message)");
        assert_eq!(format!("{p:?}"), "Panic { message: \"(no message)\" }");
        assert_eq!(catch(|| 3).unwrap(), 3);
    }
}
