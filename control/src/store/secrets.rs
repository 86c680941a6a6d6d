//! The `secrets` tree: the secrets an admin registered, by name. A record holds a name,
//! a path and grants, never a value. Each write changes one key of this tree only, so
//! it is one sled operation under the write mutex (not the multi-tree transaction),
//! flushed before it is acknowledged.

use super::error::{Result, StoreError};
use super::Store;
use crate::model::Secret;

impl Store {
    /// Files a new secret; flushed. A name already registered is a `Conflict`.
    pub fn insert_secret(&self, s: &Secret) -> Result<()> {
        let _guard = self.write_lock()?;
        let value = serde_json::to_vec(s).map_err(StoreError::Encode)?;
        let t = self.t()?;
        let taken = self
            .note(
                t.secrets
                    .compare_and_swap(s.name.as_bytes(), None::<&[u8]>, Some(value))
                    .map_err(StoreError::from),
            )?
            .is_err();
        if taken {
            return Err(StoreError::Conflict(format!(
                "a secret named {:?} is registered already",
                s.name
            )));
        }
        self.settle()
    }

    /// Changes the secret `name` under the write mutex: `f` either changes the record
    /// or refuses; flushed. `NotFound` when there is none.
    pub fn change_secret<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Secret) -> Result<T>,
    ) -> Result<(Secret, T)> {
        let _guard = self.write_lock()?;
        let mut s = self.get_secret(name)?.ok_or(StoreError::NotFound)?;
        let out = f(&mut s)?;
        let value = serde_json::to_vec(&s).map_err(StoreError::Encode)?;
        self.note(
            self.t()?
                .secrets
                .insert(name.as_bytes(), value)
                .map_err(StoreError::from),
        )?;
        self.settle()?;
        Ok((s, out))
    }

    /// Forgets the secret `name`; flushed. `NotFound` when there is none.
    pub fn delete_secret(&self, name: &str) -> Result<Secret> {
        let _guard = self.write_lock()?;
        let s = self.get_secret(name)?.ok_or(StoreError::NotFound)?;
        self.note(
            self.t()?
                .secrets
                .remove(name.as_bytes())
                .map_err(StoreError::from),
        )?;
        self.settle()?;
        Ok(s)
    }

    /// The secret named `name`.
    pub fn get_secret(&self, name: &str) -> Result<Option<Secret>> {
        self.t()?
            .secrets
            .get(name.as_bytes())?
            .map(|v| decode_secret(name.as_bytes(), &v))
            .transpose()
    }

    /// Every registered secret, by name.
    pub fn list_secrets(&self) -> Result<Vec<Secret>> {
        let mut out = Vec::new();
        for item in self.t()?.secrets.iter() {
            let (key, value) = item?;
            out.push(decode_secret(&key, &value)?);
        }
        Ok(out)
    }
}

fn decode_secret(key: &[u8], value: &[u8]) -> Result<Secret> {
    let name = String::from_utf8_lossy(key);
    let s: Secret = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("secret {name}"), e))?;
    if s.name.as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "secret stored under {name} says name {}",
            s.name
        )));
    }
    Ok(s)
}
