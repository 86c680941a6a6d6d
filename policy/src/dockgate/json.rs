//! Reading JSON as strictly as Docker's reader is loose: one value without duplicate
//! keys, known fields in their exact spelling, typed reads with `null` as absent.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::denied::{deny, Denied, Reason};

/// Builds a [`Value`] refusing duplicate object keys: Go keeps the last copy, a reader
/// of the first would judge another request than Docker runs.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let value = map.next_value_seed(StrictValue)?;
            obj.insert(key, value);
        }
        Ok(Value::Object(obj))
    }
}

pub(super) fn strict_json(bytes: &[u8]) -> Result<Value, Denied> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| deny(Reason::InvalidJson, format!("invalid JSON: {e}")))?;
    Ok(value)
}

/// How a body field is judged.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    /// Read into the spec (or checked on its own).
    Read,
    /// termgate never sends it: only absent, `null` or an empty value (`false`, `0`,
    /// `""`, `[]`, `{}`).
    DefaultOnly,
    /// Only absent or `null`: an empty value changes something (`MaskedPaths: []`
    /// unmasks every path).
    NullOnly,
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0) || n.as_u64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Checks an object's keys against `known` (exact spelling: Go matches keys
/// case-insensitively, so any other spelling could reach a field unseen).
pub(super) fn check_fields(
    obj: &Map<String, Value>,
    known: &[(&str, Field)],
    at: &str,
    default_only: Reason,
) -> Result<(), Denied> {
    for (key, value) in obj {
        match known.iter().find(|(name, _)| *name == key.as_str()) {
            None => {
                return Err(deny(
                    Reason::FieldNotAllowed,
                    format!("unknown field {at}{key}"),
                ))
            }
            Some((_, Field::DefaultOnly)) if !is_empty_value(value) => {
                return Err(deny(
                    default_only,
                    format!("{at}{key} must be absent or empty, got {value}"),
                ))
            }
            Some((_, Field::NullOnly)) if !value.is_null() => {
                return Err(deny(
                    default_only,
                    format!("{at}{key} must be absent, got {value}"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Typed reads of one JSON object's fields, `null` meaning absent as in Go.
pub(super) struct Fields<'a> {
    pub(super) obj: &'a Map<String, Value>,
    pub(super) at: &'a str,
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str) -> Denied {
        deny(
            Reason::InvalidBody,
            format!("{}{key} must be {want}", self.at),
        )
    }

    pub(super) fn boolean(&self, key: &str) -> Result<bool, Denied> {
        match self.get(key) {
            None => Ok(false),
            Some(v) => v.as_bool().ok_or_else(|| self.wrong(key, "a boolean")),
        }
    }

    pub(super) fn text(&self, key: &str) -> Result<Option<&'a str>, Denied> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a string")),
        }
    }

    pub(super) fn int(&self, key: &str) -> Result<Option<i64>, Denied> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an integer")),
        }
    }

    pub(super) fn array(&self, key: &str) -> Result<&'a [Value], Denied> {
        match self.get(key) {
            None => Ok(&[]),
            Some(v) => v
                .as_array()
                .map(Vec::as_slice)
                .ok_or_else(|| self.wrong(key, "an array")),
        }
    }

    pub(super) fn strings(&self, key: &str) -> Result<Vec<String>, Denied> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.wrong(key, "an array of strings"))
            })
            .collect()
    }

    pub(super) fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>, Denied> {
        let Some(v) = self.get(key) else {
            return Ok(BTreeMap::new());
        };
        let obj = v
            .as_object()
            .ok_or_else(|| self.wrong(key, "an object of strings"))?;
        obj.iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_owned()))
                    .ok_or_else(|| self.wrong(key, "an object of strings"))
            })
            .collect()
    }

    pub(super) fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, Denied> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_object()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an object")),
        }
    }
}
