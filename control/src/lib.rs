//! termgate's control service: the only component that holds the Docker socket.
//!
//! It decides who may have which session (through `policy`), makes sessions real on
//! Docker (`docker`), keeps its books in sled (`store`), repairs drift (`reconcile`)
//! ends sessions whose profile's limits ran out (`cull`) and tells gateways what exists (the route feed in `api`). It never carries terminal
//! bytes.

pub mod api;
pub mod audit;
pub mod certs;
pub mod cull;
pub mod docker;
pub mod dockgate;
pub mod error;
pub mod hosts;
pub mod labels;
pub mod live;
pub mod metrics;
pub mod model;
pub mod reconcile;
pub mod recordings;
pub mod retention;
pub mod service;
pub mod store;
pub mod volumes;
