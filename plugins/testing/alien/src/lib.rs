//! Test plugin `alien`: a valid component that implements no world of verdict.
wit_bindgen::generate!({ world: "alien", path: "wit" });

struct Alien;

impl exports::example::alien::greeter::Guest for Alien {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Alien);
