//! The `meta` tree's grant key: the key terminal grants are sealed with.

use super::error::{Result, StoreError};
use super::keys::GRANT_KEY;
use super::Store;

impl Store {
    /// The key terminal grants are sealed with ([`policy::grant`]): 32 random bytes
    /// made on first use and kept in `meta`, so a restarted control still opens the
    /// grants of terminals that stayed open.
    pub fn grant_key(&self) -> Result<[u8; 32]> {
        let t = self.t()?;
        if let Some(key) = t.meta.get(GRANT_KEY)? {
            return <[u8; 32]>::try_from(key.as_ref())
                .map_err(|_| StoreError::corrupt("meta grant_key is not 32 bytes".to_owned()));
        }
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(StoreError::Randomness)?;
        let _guard = self.lock();
        // Two first uses at once: the first key stored wins.
        if let Err(stored) = t
            .meta
            .compare_and_swap(GRANT_KEY, None::<&[u8]>, Some(&key[..]))?
        {
            if let Some(current) = stored.current {
                key = <[u8; 32]>::try_from(current.as_ref()).map_err(|_| {
                    StoreError::corrupt("meta grant_key is not 32 bytes".to_owned())
                })?;
            }
        }
        drop(_guard);
        self.flush()?;
        Ok(key)
    }
}
