//! Which consumers a listing reads, and what it says when the one asked for has nothing.

use diesel_inbox::Inbox;

use crate::Failure;

/// The inboxes a listing reads: `inbox`, or with `--all-consumers` each of `with_rows`, the
/// consumers that have rows of the listing's kind.
pub(crate) fn chosen(
    inbox: &Inbox,
    all_consumers: bool,
    with_rows: impl FnOnce() -> Result<Vec<String>, Failure>,
) -> Result<Vec<Inbox>, Failure> {
    if !all_consumers {
        return Ok(vec![inbox.clone()]);
    }
    with_rows()?
        .iter()
        .map(|name| Ok(Inbox::new(name.as_str()).map_err(diesel_inbox::Error::from)?))
        .collect()
}

/// The line that says a listing found nothing for `consumer`, and which consumers have rows.
pub(crate) fn nothing_for(what: &str, consumer: &str, with_rows: &[String]) -> String {
    let others: Vec<&str> = with_rows
        .iter()
        .map(String::as_str)
        .filter(|name| *name != consumer)
        .collect();
    if others.is_empty() {
        format!("no {what} for consumer {consumer}")
    } else {
        format!(
            "no {what} for consumer {consumer}; consumers with some: {} (pass --consumer NAME, or --all-consumers)",
            others.join(", ")
        )
    }
}

/// The line that says where the next page of `consumer`'s `what` starts: `after` as the
/// command line takes it.
pub(crate) fn more_line(what: &str, consumer: &str, after: &str, all_consumers: bool) -> String {
    if all_consumers {
        format!("more {what} of consumer {consumer} may follow: rerun with --consumer {consumer} --after {after}")
    } else {
        format!("more {what} may follow: rerun with --after {after}")
    }
}

#[cfg(test)]
mod tests {
    use super::nothing_for;

    #[test]
    fn nothing_for_names_the_other_consumers_only() {
        let names = [
            "billing".to_owned(),
            "default".to_owned(),
            "ledger".to_owned(),
        ];
        assert_eq!(
            nothing_for("gaps", "default", &names),
            "no gaps for consumer default; consumers with some: billing, ledger (pass --consumer NAME, or --all-consumers)"
        );
        assert_eq!(
            nothing_for("claims", "billing", &names[..1]),
            "no claims for consumer billing"
        );
    }
}
