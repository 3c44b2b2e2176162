//! AdmissionReview bodies as the webhook takes them: a clear refusal for
//! what is not a review, never a panic, and an answer that can be written
//! for every request that is one.
#![no_main]

use kube::core::admission::AdmissionResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    match verdict::admission::read_review(body) {
        Ok((_, request)) => {
            let review = AdmissionResponse::from(&request).into_review();
            serde_json::to_value(&review).expect("an answer serializes");
        }
        Err(refused) => assert!(!refused.to_string().is_empty()),
    }
});
