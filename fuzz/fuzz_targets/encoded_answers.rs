//! The bytes a status plugin returns through `status-encoded`: a plugin may
//! return anything, so these must decode or be refused without a panic or
//! an allocation the bytes do not pay for, and decoded verdicts must pass
//! or fail the host's checks cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::plugins::{checked_answers, decode_answers};

fuzz_target!(|bytes: &[u8]| {
    let Ok(answers) = decode_answers(bytes) else {
        return;
    };
    // Asked for the applications answered, and for others.
    let asked: Vec<(String, String)> = answers
        .iter()
        .map(|answer| match answer {
            Ok(verdict) => (verdict.app.namespace.clone(), verdict.app.name.clone()),
            Err(_) => ("shop".to_string(), "web".to_string()),
        })
        .collect();
    let _ = checked_answers(answers.clone(), &asked);
    let _ = checked_answers(answers, &[("shop".to_string(), "web".to_string())]);
});
