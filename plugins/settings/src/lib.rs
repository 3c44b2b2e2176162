//! A policy's settings checked against its own settings schema (the JSON
//! Schema its `describe` gives as `settings-schema`), in words an operator
//! can act on: `setting `grace-ms` must be an integer, not "1m"`.
//!
//! Settings schemas are small and flat, and a policy runs in a sandbox that
//! pays for every byte of its code, so this reads the part of JSON Schema
//! they use, and no more: `type` (one or a list), `enum`, `const`,
//! `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`,
//! `minLength`, `maxLength`, `properties`, `required`,
//! `additionalProperties` (`false`, or a schema) and `items`. Other
//! keywords are not checked. As in JSON Schema, an object takes keys its
//! `properties` do not name unless `additionalProperties` is `false`: a
//! policy that refuses unknown keys says so in its schema.

use serde_json::{Map, Value};

/// Check `settings` (a JSON text) against `schema` (a JSON Schema text):
/// nothing when they conform, else what is wrong, naming the setting.
pub fn check(schema: &str, settings: &str) -> Result<(), String> {
    let schema: Value = serde_json::from_str(schema)
        .map_err(|e| format!("the policy's own settings schema does not read: {e}"))?;
    let settings = object(settings)?;
    conform(&schema, &Value::Object(settings), "")
}

/// `settings` read as a JSON object, the shape every policy's settings
/// have.
pub fn object(settings: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(settings) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "the settings must be a JSON object, not {}",
            shown(&other)
        )),
        Err(e) => Err(format!("the settings are not JSON: {e}")),
    }
}

/// How a value is named in a message: short values whole, long ones cut.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// What the message calls the value at `path`.
fn subject(path: &str) -> String {
    if path.is_empty() {
        "the settings".into()
    } else {
        format!("setting `{path}`")
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        // A type this reader does not know is not held against the value.
        _ => true,
    }
}

fn article(name: &str) -> &'static str {
    match name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

fn conform(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        // `true` (or anything not an object) takes every value; `false`
        // none.
        return match schema {
            Value::Bool(false) => Err(format!("{} is not allowed", subject(path))),
            _ => Ok(()),
        };
    };
    types(schema, value, path)?;
    if let Some(choices) = schema.get("enum").and_then(Value::as_array)
        && !choices.contains(value)
    {
        let choices: Vec<String> = choices.iter().map(shown).collect();
        return Err(format!(
            "{} must be one of {}, not {}",
            subject(path),
            choices.join(", "),
            shown(value)
        ));
    }
    if let Some(only) = schema.get("const")
        && only != value
    {
        return Err(format!(
            "{} must be {}, not {}",
            subject(path),
            shown(only),
            shown(value)
        ));
    }
    if let Some(number) = value.as_f64() {
        bounds(schema, number, value, path)?;
    }
    if let Some(text) = value.as_str() {
        lengths(schema, text, path)?;
    }
    if let Some(map) = value.as_object() {
        keys(schema, map, path)?;
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, item) in list.iter().enumerate() {
            conform(items, item, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

fn types(schema: &Map<String, Value>, value: &Value, path: &str) -> Result<(), String> {
    let names: Vec<&str> = match schema.get("type") {
        Some(Value::String(name)) => vec![name],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if names.is_empty() || names.iter().any(|name| is_type(value, name)) {
        return Ok(());
    }
    let wanted: Vec<String> = names
        .iter()
        .map(|name| format!("{} {name}", article(name)))
        .collect();
    Err(format!(
        "{} must be {}, not {}",
        subject(path),
        wanted.join(" or "),
        shown(value)
    ))
}

fn bounds(
    schema: &Map<String, Value>,
    number: f64,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    let limit = |key: &str| schema.get(key).and_then(Value::as_f64);
    let checks: [(&str, &str, fn(f64, f64) -> bool); 4] = [
        ("minimum", "at least", |n, l| n >= l),
        ("maximum", "at most", |n, l| n <= l),
        ("exclusiveMinimum", "more than", |n, l| n > l),
        ("exclusiveMaximum", "less than", |n, l| n < l),
    ];
    for (key, words, holds) in checks {
        if let Some(bound) = limit(key)
            && !holds(number, bound)
        {
            return Err(format!(
                "{} must be {words} {}, not {}",
                subject(path),
                shown(&schema[key]),
                shown(value)
            ));
        }
    }
    Ok(())
}

fn lengths(schema: &Map<String, Value>, text: &str, path: &str) -> Result<(), String> {
    let length = text.chars().count() as u64;
    if let Some(least) = schema.get("minLength").and_then(Value::as_u64)
        && length < least
    {
        return Err(format!(
            "{} must be at least {least} characters long, not {length}",
            subject(path)
        ));
    }
    if let Some(most) = schema.get("maxLength").and_then(Value::as_u64)
        && length > most
    {
        return Err(format!(
            "{} must be at most {most} characters long, not {length}",
            subject(path)
        ));
    }
    Ok(())
}

fn keys(schema: &Map<String, Value>, map: &Map<String, Value>, path: &str) -> Result<(), String> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                return Err(format!("{} is missing", subject(&at(key))));
            }
        }
    }
    for (key, value) in map {
        match (properties.get(key), schema.get("additionalProperties")) {
            (Some(property), _) => conform(property, value, &at(key))?,
            (None, Some(Value::Bool(false))) => {
                let known: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
                let known = if known.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("the known ones are {}", known.join(", "))
                };
                return Err(format!("unknown {}: {known}", subject(&at(key))));
            }
            (None, Some(extra)) => conform(extra, value, &at(key))?,
            (None, None) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    const SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{
        "grace-ms":{"type":"integer","minimum":0},
        "ratio":{"type":"number","exclusiveMinimum":0,"maximum":1},
        "remedy":{"enum":["replace","scale-down"]},
        "label":{"type":"string","minLength":1},
        "nested":{"type":"object","properties":{"on":{"type":"boolean"}}}}}"#;

    #[test]
    fn settings_that_conform_pass() {
        assert_eq!(check(SCHEMA, "{}"), Ok(()));
        let good = r#"{"grace-ms":60000,"ratio":0.5,"remedy":"replace","label":"x",
            "nested":{"on":true,"other":1}}"#;
        assert_eq!(check(SCHEMA, good), Ok(()));
        // A whole number written with a fraction of zero is an integer.
        assert_eq!(check(SCHEMA, r#"{"grace-ms":5.0}"#), Ok(()));
    }

    #[test]
    fn each_refusal_names_the_setting_what_was_expected_and_what_was_given() {
        let refused = |settings: &str| check(SCHEMA, settings).unwrap_err();
        assert_eq!(
            refused(r#"{"grace-ms":"1m"}"#),
            r#"setting `grace-ms` must be an integer, not "1m""#
        );
        assert_eq!(
            refused(r#"{"grace-ms":-1}"#),
            "setting `grace-ms` must be at least 0, not -1"
        );
        assert_eq!(
            refused(r#"{"ratio":0}"#),
            "setting `ratio` must be more than 0, not 0"
        );
        assert_eq!(
            refused(r#"{"ratio":2}"#),
            "setting `ratio` must be at most 1, not 2"
        );
        assert_eq!(
            refused(r#"{"remedy":"reboot"}"#),
            r#"setting `remedy` must be one of "replace", "scale-down", not "reboot""#
        );
        assert_eq!(
            refused(r#"{"label":""}"#),
            "setting `label` must be at least 1 characters long, not 0"
        );
        assert_eq!(
            refused(r#"{"nested":{"on":"yes"}}"#),
            r#"setting `nested.on` must be a boolean, not "yes""#
        );
        let unknown = refused(r#"{"grace":1}"#);
        assert!(
            unknown.starts_with("unknown setting `grace`: the known ones are `grace-ms`"),
            "{unknown}"
        );
    }

    #[test]
    fn settings_that_are_not_an_object_or_not_json_are_refused() {
        assert_eq!(
            check(SCHEMA, "[1]").unwrap_err(),
            "the settings must be a JSON object, not [1]"
        );
        assert!(
            check(SCHEMA, "{")
                .unwrap_err()
                .starts_with("the settings are not JSON"),
        );
        assert!(
            check("{", "{}")
                .unwrap_err()
                .starts_with("the policy's own settings schema does not read")
        );
    }

    #[test]
    fn without_additional_properties_false_unknown_keys_pass() {
        let open = r#"{"type":"object","properties":{"a":{"type":"integer"}}}"#;
        assert_eq!(check(open, r#"{"b":"anything"}"#), Ok(()));
        assert!(check(open, r#"{"a":"x"}"#).is_err());
    }
}
