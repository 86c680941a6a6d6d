//! Targets: registered upstreams that are routed like sessions but owned by nobody.

use policy::SessionId;

use super::error::{Result, StoreError};
use super::tx::encode;
use super::Store;
use crate::model::{Change, Target};

impl Store {
    /// Registers or replaces a target and publishes its route; flushed. A name another
    /// target uses is a `Conflict`.
    pub fn put_target(&self, t: &Target) -> Result<()> {
        let _guard = self.write_lock()?;
        if let Some(other) = self
            .list_targets()?
            .into_iter()
            .find(|o| o.name == t.name && o.id != t.id)
        {
            return Err(StoreError::Conflict(format!(
                "the name {:?} is taken by target {}",
                t.name, other.id
            )));
        }
        let route = t.route().ok_or_else(|| {
            StoreError::Conflict(format!("upstream {:?} is not valid", t.upstream))
        })?;
        self.transact(|tx| {
            tx.targets.insert(t.id.as_str().as_bytes(), encode(t)?)?;
            let route = route.clone();
            tx.bump(|rev| Change::Upsert { rev, route })?;
            Ok(())
        })?;
        self.settle()
    }

    /// Removes a target and publishes the removal (its live terminals close); flushed.
    /// `NotFound` if there is no such target.
    pub fn delete_target(&self, id: &SessionId) -> Result<()> {
        let _guard = self.write_lock()?;
        if self.get_target(id)?.is_none() {
            return Err(StoreError::NotFound);
        }
        self.transact(|tx| {
            tx.targets.remove(id.as_str().as_bytes())?;
            tx.bump(|rev| Change::Remove { rev, session: *id })?;
            Ok(())
        })?;
        self.settle()
    }

    /// The target with this id.
    pub fn get_target(&self, id: &SessionId) -> Result<Option<Target>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .targets
            .get(key)?
            .map(|v| decode_target(key, &v))
            .transpose()
    }

    /// Every target, sorted by name.
    pub fn list_targets(&self) -> Result<Vec<Target>> {
        let mut out = Vec::new();
        for item in self.t()?.targets.iter() {
            let (key, value) = item?;
            out.push(decode_target(&key, &value)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

fn decode_target(key: &[u8], value: &[u8]) -> Result<Target> {
    let name = String::from_utf8_lossy(key);
    let t: Target = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("target {name}"), e))?;
    if t.id.as_str().as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "target stored under {name} says id {}",
            t.id
        )));
    }
    Ok(t)
}
