//! The journal of loopwright runs: the events that record every state change ([`event`]), the
//! closed loop's facts they carry ([`closed_loop`]), the state a run's events fold into
//! ([`state`]), the ids ([`ids`]), and the port every journal backend implements ([`store`]).
//!
//! Nothing here decides or performs anything: the engine decides from the state and appends
//! events; stores keep them; front-ends read them. Start at [`event::Event`], then
//! [`state::RunState::apply`].

pub mod closed_loop;
pub mod event;
pub mod forge;
pub mod hash;
pub mod ids;
pub mod state;
pub mod store;
pub mod trace;

pub use event::{Event, EventRecord, FailureKind, Outputs, Owner, RunStarted, RunStatus, SkipReason, StageError};
pub use ids::{LeaseEpoch, RunId, TaskId};
pub use state::{RunState, StageStatus};
pub use store::{FeedEntry, RunPage, RunQuery, RunSummary, Store, StoreError};
