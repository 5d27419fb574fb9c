//! What the engine behind a connection offers beyond one plain server, as `doctor` reports it:
//! a PostgreSQL primary's standbys and whether they confirm each commit, a MariaDB Galera
//! cluster and what differs there, and what bounds a transaction that stalls. Pure verdicts
//! over what the backends read (`backend/postgres.rs`, `backend/mysql.rs`).

use crate::check::{Check, CheckStatus};

/// A PostgreSQL server's replication, as `pg_stat_replication` and its settings show it.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replication {
    /// Whether this server is a standby (in recovery): it cannot take the inbox's writes.
    pub(crate) in_recovery: bool,
    /// `sync_state` of each standby streaming from this server (`async`, `potential`, `sync`,
    /// `quorum`); `None` where this role may not read it.
    pub(crate) standbys: Vec<Option<String>>,
    /// `synchronous_commit`.
    pub(crate) synchronous_commit: String,
}

#[cfg(feature = "postgres")]
impl Replication {
    /// Whether a commit acknowledged here survives a failover to a standby: with no standby
    /// there is nothing to fail over to (the check is about replication only); with standbys,
    /// one must confirm each commit (`synchronous_standby_names`) and the commit must wait for
    /// it (`synchronous_commit` of `on`, `remote_write` or `remote_apply`).
    pub(crate) fn check(&self) -> Check {
        const NAME: &str = "replication";
        if self.in_recovery {
            return Check::new(NAME, CheckStatus::Fail, "this server is a standby in recovery: it refuses the inbox's writes; connect to the primary (a multi-host URL with target_session_attrs=read-write finds it after a failover)");
        }
        if self.standbys.is_empty() {
            return Check::new(NAME, CheckStatus::Ok, "no standby streams from this server");
        }
        let confirming = self
            .standbys
            .iter()
            .filter(|state| matches!(state.as_deref(), Some("sync" | "quorum")))
            .count();
        let unknown = self.standbys.iter().filter(|state| state.is_none()).count();
        let waits = matches!(
            self.synchronous_commit.as_str(),
            "on" | "remote_write" | "remote_apply"
        );
        let standbys = self.standbys.len();
        if confirming > 0 && waits {
            return Check::new(
                NAME,
                CheckStatus::Ok,
                format!("{confirming} of {standbys} standbys confirm each commit (synchronous_commit = {}): an acknowledged effect survives a failover to them", self.synchronous_commit),
            );
        }
        let detail = if unknown == standbys {
            format!("{standbys} standbys stream from this server, and this role may not read whether they are synchronous (grant pg_read_all_stats): if they are not, effects acknowledged here can be lost at failover")
        } else {
            format!("{standbys} standbys stream from this server and no commit waits for one (synchronous_commit = {}, {confirming} synchronous): effects acknowledged here can be lost at failover, with their inbox rows, and their events then run again; set synchronous_standby_names and synchronous_commit = on (or remote_apply)", self.synchronous_commit)
        };
        Check::new(NAME, CheckStatus::Warn, detail)
    }
}

/// A MySQL or MariaDB server's settings that change the inbox's guarantees.
#[cfg(feature = "mysql")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MysqlEngine {
    /// Whether Galera replication is on (`wsrep_on`).
    pub(crate) galera: bool,
    /// `auto_increment_increment`: above 1, positions are not consecutive.
    pub(crate) auto_increment_increment: u64,
    /// This session's `idle_transaction_timeout` in seconds (MariaDB); `None` where the
    /// server has none (Oracle MySQL).
    pub(crate) idle_transaction_timeout: Option<u64>,
    /// This session's `wait_timeout` in seconds: what ends a session the server believes idle.
    pub(crate) wait_timeout: u64,
}

#[cfg(feature = "mysql")]
impl MysqlEngine {
    /// The longest `wait_timeout` that `doctor` accepts on a Galera node.
    const GALERA_WAIT_TIMEOUT: u64 = 600;

    /// The checks: the cluster, then the bounds on a stalled delivery.
    pub(crate) fn checks(&self) -> Vec<Check> {
        vec![self.cluster(), self.idle_timeout(), self.wait_timeout()]
    }

    /// On a Galera node, a brute-force abort can leave a session that the server believes idle
    /// (`Sleep`, no transaction) while its client still waits for the reply to a statement:
    /// only `wait_timeout` ends that session, and with it the client's wait.
    fn wait_timeout(&self) -> Check {
        const NAME: &str = "wait_timeout";
        if self.galera && self.wait_timeout > Self::GALERA_WAIT_TIMEOUT {
            return Check::new(NAME, CheckStatus::Warn, format!("{} s on a Galera node: a delivery whose reply a brute-force abort swallowed waits that long (the server shows its session Sleep); set wait_timeout to {} s or less, and let the pool reconnect idle connections", self.wait_timeout, Self::GALERA_WAIT_TIMEOUT));
        }
        Check::new(NAME, CheckStatus::Ok, format!("{} s", self.wait_timeout))
    }

    fn cluster(&self) -> Check {
        const NAME: &str = "cluster";
        if !self.galera {
            return Check::new(NAME, CheckStatus::Ok, "a single server (wsrep_on is off)");
        }
        Check::new(
            NAME,
            CheckStatus::Ok,
            format!("a Galera cluster node (wsrep_on): exactly once holds, with certification failures retried as contention; GET_LOCK, FOR UPDATE and SKIP LOCKED are local to a node, so a prune holds the lease row diesel_inbox_leases 'prune' as well, and relays on several nodes take disjoint rows through their leases, both guarded by certification; outbox positions step by auto_increment_increment = {}, not by one; a session killed inside a transaction may commit it", self.auto_increment_increment),
        )
    }

    fn idle_timeout(&self) -> Check {
        const NAME: &str = "idle_transaction_timeout";
        match self.idle_transaction_timeout {
            Some(0) => Check::new(NAME, CheckStatus::Warn, "0: a transaction stalled on a server that stopped answering holds its locks and its worker without end; set idle_transaction_timeout (for example 60) on the server, which ends such a session and lets its delivery be redelivered"),
            Some(seconds) => Check::new(
                NAME,
                CheckStatus::Ok,
                format!("{seconds} s: a stalled transaction's session is ended, and its delivery redelivered"),
            ),
            None => Check::new(NAME, CheckStatus::Warn, "this server has no idle_transaction_timeout (MySQL, not MariaDB): nothing bounds a transaction stalled on a server that stopped answering"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "postgres")]
    fn primary(standbys: &[Option<&str>], synchronous_commit: &str) -> Replication {
        Replication {
            in_recovery: false,
            standbys: standbys.iter().map(|s| s.map(str::to_owned)).collect(),
            synchronous_commit: synchronous_commit.to_owned(),
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_primary_whose_standbys_are_asynchronous_is_warned_that_acknowledged_effects_can_be_lost() {
        let check = primary(&[Some("async")], "on").check();
        assert_eq!(check.status, CheckStatus::Warn);
        assert!(
            check.detail.contains("lost at failover"),
            "{}",
            check.detail
        );
        assert!(check.detail.contains("synchronous_standby_names"));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_synchronous_standby_only_counts_when_the_commit_waits_for_it() {
        assert_eq!(
            primary(&[Some("sync")], "on").check().status,
            CheckStatus::Ok
        );
        assert_eq!(
            primary(&[Some("async"), Some("quorum")], "remote_apply")
                .check()
                .status,
            CheckStatus::Ok
        );
        for local in ["local", "off"] {
            assert_eq!(
                primary(&[Some("sync")], local).check().status,
                CheckStatus::Warn,
                "{local}"
            );
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_single_server_passes_and_a_standby_fails() {
        assert_eq!(primary(&[], "on").check().status, CheckStatus::Ok);
        let standby = Replication {
            in_recovery: true,
            ..primary(&[], "on")
        };
        assert_eq!(standby.check().status, CheckStatus::Fail);
        let hidden = primary(&[None], "on").check();
        assert_eq!(hidden.status, CheckStatus::Warn);
        assert!(hidden.detail.contains("pg_read_all_stats"));
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn a_galera_node_is_reported_with_what_differs_there() {
        let node = MysqlEngine {
            galera: true,
            auto_increment_increment: 3,
            idle_transaction_timeout: Some(60),
            wait_timeout: 28_800,
        };
        let [cluster, idle, wait] = <[Check; 3]>::try_from(node.checks()).unwrap();
        assert_eq!(cluster.status, CheckStatus::Ok, "nothing to change");
        assert!(cluster.detail.contains("auto_increment_increment = 3"));
        assert!(cluster.detail.contains("lease row"));
        assert_eq!(idle.status, CheckStatus::Ok);
        assert_eq!(wait.status, CheckStatus::Warn, "{wait:?}");
        let bounded = MysqlEngine {
            wait_timeout: 60,
            ..node
        };
        assert_eq!(bounded.checks()[2].status, CheckStatus::Ok);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn a_server_that_never_ends_a_stalled_transaction_is_warned() {
        for idle_transaction_timeout in [Some(0), None] {
            let server = MysqlEngine {
                galera: false,
                auto_increment_increment: 1,
                idle_transaction_timeout,
                wait_timeout: 28_800,
            };
            let [cluster, idle, wait] = <[Check; 3]>::try_from(server.checks()).unwrap();
            assert_eq!(
                (cluster.status, wait.status),
                (CheckStatus::Ok, CheckStatus::Ok)
            );
            assert_eq!(
                idle.status,
                CheckStatus::Warn,
                "{idle_transaction_timeout:?}"
            );
        }
    }
}
