//! Where a run's work goes when it came from a forge (SPEC §14). The engine decides when
//! (after its stages succeed, after each CI round sent back, before it ends failed); the
//! application's adapter does it: pushes the branch and opens or updates the change request,
//! or posts the one comment that reports a failure. Each is found again on the forge after a
//! crash (by its branch or a hidden marker), so doing it twice changes nothing.

use crate::state::RunState;

/// A change request as delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Its number.
    pub number: u64,
    /// Where a person opens it.
    pub url: String,
    /// The head commit pushed.
    pub head: String,
}

/// Why delivering did not work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryError {
    /// In words.
    pub message: String,
    /// When to try again (none: it will not work by waiting).
    pub retry_at: Option<jiff::Timestamp>,
}

/// How merging a change request went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Merged at the head asked for, or the forge's auto-merge enabled for it (`auto_merge`).
    Merged {
        /// The forge merges it itself once its protection is satisfied.
        auto_merge: bool,
    },
    /// The change request's head is another commit (someone pushed to its branch): nothing
    /// was merged.
    Moved {
        /// The head found.
        head: String,
    },
    /// The forge would not merge it.
    Refused {
        /// What it said.
        message: String,
    },
}

/// The application's side of delivery.
#[allow(async_fn_in_trait)]
pub trait Delivery {
    /// Pushes the run's branch and opens (round 0) or updates its change request.
    async fn deliver(&self, state: &RunState, round: u32) -> Result<Delivered, DeliveryError>;
    /// Reports the run's failure where its work came from: the comment's URL.
    async fn report_failure(&self, state: &RunState) -> Result<String, DeliveryError>;
    /// Asks a person on the change request after red CI round `round`: the comment's URL.
    async fn escalate(&self, state: &RunState, round: u32) -> Result<String, DeliveryError>;
    /// Merges the change request at `head` exactly (or enables the forge's auto-merge for that
    /// head); one that is merged already is merged.
    async fn merge(&self, state: &RunState, head: &str) -> MergeOutcome;
}

/// No forge here: a run that came from one cannot be delivered by this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoDelivery;

impl Delivery for NoDelivery {
    async fn deliver(&self, _: &RunState, _: u32) -> Result<Delivered, DeliveryError> {
        Err(DeliveryError { message: "this process has no [github] settings to deliver with".into(), retry_at: None })
    }
    async fn report_failure(&self, _: &RunState) -> Result<String, DeliveryError> {
        Err(DeliveryError { message: "this process has no [github] settings to report with".into(), retry_at: None })
    }
    async fn escalate(&self, _: &RunState, _: u32) -> Result<String, DeliveryError> {
        Err(DeliveryError { message: "this process has no [github] settings to ask with".into(), retry_at: None })
    }
    async fn merge(&self, _: &RunState, _: &str) -> MergeOutcome {
        MergeOutcome::Refused { message: "this process has no [github] settings to merge with".into() }
    }
}
