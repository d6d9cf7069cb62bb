//! The loopwright engine: a run's journal events, the state they fold into, the state machine
//! that decides each next step, and the driver that performs steps through ports.
//!
//! A run's events and state live in `loopwright-journal` (re-exported here as [`event`],
//! [`state`], [`ids`]). Start reading at [`run`] (the life of a run), then [`decide`] (every
//! decision). The engine does no I/O of its own: the journal is a [`Store`], stages run
//! through a [`ports::Runner`], time comes from a [`ports::Clock`].

pub mod closed_loop;
pub mod decide;
pub mod patterns;
pub mod ports;
pub mod projection;
pub mod prompt;
pub mod result;
pub mod run;
pub mod tokens;

pub use loopwright_journal::{event, forge, hash, ids, state, trace};

pub use event::{Event, EventRecord, FailureKind, Outputs, Owner, RunStarted, RunStatus, SkipReason, StageError};
pub use ids::{RunId, TaskId};
pub use loopwright_journal::{FeedEntry, RunPage, RunQuery, RunSummary};
pub use ports::{
    Changes, Clock, NeverStop, NoChanges, NoObserverExt, Observer, Runner, Stop, Stopper, Store, StoreError,
    SystemClock,
};
pub use result::PipelineResult;
pub use run::Engine;
pub use state::{RunState, StageStatus};
