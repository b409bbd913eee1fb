//! The WattSwarm executor-runtime protocol as data and rules: the wire types a WattSwarm kernel sends
//! to and expects from an executor runtime ([`wire`]), the reason-code table ([`reason`]), the three
//! built-in verification policies with their hashes and bindings ([`policy`]), the hashes the kernel
//! and the reference runtime compute ([`hash`]), the checks the kernel applies to `/execute` and
//! `/verify` answers ([`checks`]) and the kernel's default task contract ([`task`]).
//!
//! Written from the protocol description in `wattswarm-protocol.md` (the upstream is AGPL; nothing is
//! copied from it). Where the upstream seed document disagrees, the description of what the kernel
//! does wins: serve must be accepted by real kernels, not by the seed document.
//!
//! A leaf: it imports only std, serde, serde_json, sha2 and base64, nothing of aiwg-serve's, and does
//! no I/O, so the reference executor and serve can both build on it and it can be tested alone.

pub mod checks;
pub mod hash;
pub mod policy;
pub mod reason;
pub mod task;
pub mod wire;
