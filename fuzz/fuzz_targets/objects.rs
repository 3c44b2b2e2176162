//! A file of Kubernetes objects as `verdict eval --objects` reads it (JSON
//! or YAML, `List`s, `@now` placeholders, KubeVirt's kinds), then grouped
//! into applications by each rule: an error for what is not objects, never
//! a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use verdict::observe::objects::Objects;
use verdict::observe::{Grouping, resources};

const NOW: i64 = 1_780_000_000_000;

fuzz_target!(|text: &str| {
    for grouping in [Grouping::default(), Grouping::Owner, Grouping::Namespace] {
        let mut objects = Objects::new(grouping, resources::defaults());
        if objects.add_text(Path::new("fuzz.yaml"), text, NOW).is_err() {
            return;
        }
        let inputs = objects.snapshot.apps(&[], &[], NOW);
        for input in &inputs {
            assert!(!input.app.id.name.is_empty() || !input.app.id.namespace.is_empty());
        }
    }
});
