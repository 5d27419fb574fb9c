//! Passwords out of text: any message that may carry a database URL or a driver's connection
//! error goes through [`redact`] (or [`redact_url_secrets`], when the URL is known) before it is
//! shown or logged.
//!
//! Two passes, because neither is enough alone. By pattern: the secret of every
//! `user:secret@` userinfo, with or without a well-formed scheme before it, and the value of every
//! `password=` parameter (URL query or libpq keyword form). By value: a driver may echo the
//! URL's parts in its own words, so when the URL is known its secrets are replaced wherever
//! they appear, as typed and percent-decoded.

/// What a secret is replaced by.
pub(crate) const REDACTED: &str = "***";

/// `text` with every password a database URL or connection string in it could carry replaced
/// by `***`: the secret of each `user:secret@` userinfo, and the value of each `password=`
/// parameter (`?password=...`, `&password=...`, libpq's `password=...` keyword form, quoted or
/// not). Text without either comes back unchanged.
///
/// ```
/// use diesel_inbox::redact::redact;
///
/// assert_eq!(
///     redact("cannot connect: postgres://app:S3cret@db:5432/orders"),
///     "cannot connect: postgres://app:***@db:5432/orders"
/// );
/// assert_eq!(redact("host=db password='S3 cret' user=app"), "host=db password=*** user=app");
/// assert_eq!(redact("mysql://db/app?user=app&password=S3cret"), "mysql://db/app?user=app&password=***");
/// ```
pub fn redact(text: &str) -> String {
    redact_password_parameters(&redact_userinfo(text))
}

/// [`redact`], and also every secret of `url` (its userinfo password and `password=` values,
/// as typed and percent-decoded) wherever it appears in `text`: drivers echo parts of the URL
/// their own way, or a malformed URL that no pattern recognises.
///
/// ```
/// use diesel_inbox::redact::redact_url_secrets;
///
/// let url = "postgres:/app:S3cret@db/orders"; // malformed: one slash
/// assert!(!redact_url_secrets(&format!("bad URL {url}; password S3cret"), url).contains("S3cret"));
/// ```
pub fn redact_url_secrets(text: &str, url: &str) -> String {
    let mut out = redact(text);
    for secret in secrets(url) {
        out = out.replace(&secret, REDACTED);
    }
    out
}

/// The secrets `url` carries, longest first, as typed and percent-decoded.
fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (start, end) in userinfo_secrets(url) {
        found.push(url[start..end].to_owned());
    }
    for (start, end) in password_values(url) {
        let value = &url[start..end];
        found.push(value.trim_matches(['\'', '"']).to_owned());
        found.push(value.to_owned());
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty() && s != REDACTED);
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

/// Characters that end a token: a URL in a message stops at one of them.
fn ends_token(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '(' | ')' | ',' | ';')
}

/// Byte ranges of the secret of each `user:secret@` in `text`. In each token holding an `@`,
/// the userinfo runs from after the scheme's `:`, `:/` or `://` (or the token's start) to the
/// token's last `@`, and the secret from the userinfo's first `:` to that `@`: an `@` or `/`
/// typed unencoded in a password is covered too, at the price of hiding a little more.
fn userinfo_secrets(text: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if !ends_token(c) {
            continue;
        }
        let token = &text[start..i];
        if let Some(at) = token.rfind('@') {
            let info_start = authority_start(token);
            if info_start < at {
                if let Some(colon) = token[info_start..at].find(':') {
                    let from = start + info_start + colon + 1;
                    let to = start + at;
                    if from < to {
                        ranges.push((from, to));
                    }
                }
            }
        }
        start = i + c.len_utf8();
    }
    ranges
}

/// Where the userinfo of a URL-ish token starts: after `scheme://`, `scheme:/` or `scheme:`
/// when the token starts with a scheme, after a leading `//`, else at the start.
fn authority_start(token: &str) -> usize {
    let scheme_len = token
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(token.len());
    let rest = &token[scheme_len..];
    if scheme_len > 0 && token.starts_with(|c: char| c.is_ascii_alphabetic()) {
        if let Some(after) = rest.strip_prefix(':') {
            // The scheme's colon; then up to two slashes.
            let slashes = after.len() - after.trim_start_matches('/').len();
            // `user:secret@host` with no scheme reads as scheme `user`: then the secret
            // would start at the scheme's colon, so treat a colon without slashes as the
            // userinfo's own.
            if slashes == 0 {
                return 0;
            }
            return scheme_len + 1 + slashes.min(2);
        }
    }
    token.len() - token.trim_start_matches('/').len()
}

/// Byte ranges of the values of every `password=` parameter (case-insensitive, at a word
/// start, or after `?`, `&` or `;`): quoted libpq values to their closing quote, others to the
/// next `&`, `#`, whitespace or end.
fn password_values(text: &str) -> Vec<(usize, usize)> {
    const KEY: &str = "password=";
    let lower = text.to_ascii_lowercase();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find(KEY) {
        let key = from + found;
        let value = key + KEY.len();
        from = value;
        let boundary = text[..key]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        if !boundary {
            continue;
        }
        let rest = &text[value..];
        let len = match rest.chars().next() {
            Some(quote @ ('\'' | '"')) => {
                rest[1..].find(quote).map_or(rest.len(), |close| close + 2)
            }
            _ => rest
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | '#' | '"' | '\''))
                .unwrap_or(rest.len()),
        };
        if len > 0 {
            ranges.push((value, value + len));
        }
        from = value + len;
    }
    ranges
}

fn redact_userinfo(text: &str) -> String {
    replace_ranges(text, &userinfo_secrets(text))
}

fn redact_password_parameters(text: &str) -> String {
    replace_ranges(text, &password_values(text))
}

/// `text` with each of the (sorted, disjoint) byte `ranges` replaced by `***`.
fn replace_ranges(text: &str, ranges: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in ranges {
        if start < at {
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// `%HH` escapes decoded; invalid ones and non-UTF-8 results left as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "S3cret";

    #[test]
    fn the_password_of_a_url_is_hidden_and_the_rest_kept() {
        for (text, expected) in [
            (
                "postgres://app:S3cret@127.0.0.1:5432/db",
                "postgres://app:***@127.0.0.1:5432/db",
            ),
            ("POSTGRES://app:S3cret@h/db", "POSTGRES://app:***@h/db"),
            (
                "mysql://root:S3cret@[::1]:3306/x",
                "mysql://root:***@[::1]:3306/x",
            ),
            ("postgres:/app:S3cret@h/db", "postgres:/app:***@h/db"),
            ("postgres:app:S3cret@h/db", "postgres:***@h/db"),
            ("app:S3cret@h:5432/db", "app:***@h:5432/db"),
            ("//app:S3cret@h/db", "//app:***@h/db"),
            (
                "uri: \"postgres://a:S3cret@[h:1/db\"",
                "uri: \"postgres://a:***@[h:1/db\"",
            ),
            ("postgres://app@h/db", "postgres://app@h/db"),
            ("no url here: a@b", "no url here: a@b"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn a_password_with_an_at_sign_or_a_slash_is_hidden_whole() {
        let text = "postgres://app:S3c@r/et@h/db";
        assert_eq!(redact(text), "postgres://app:***@h/db");
    }

    #[test]
    fn password_parameters_are_hidden_in_queries_and_keyword_strings() {
        for (text, expected) in [
            (
                "postgres://h/db?password=S3cret",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://h/db?sslmode=require&Password=S3cret&x=1",
                "postgres://h/db?sslmode=require&Password=***&x=1",
            ),
            (
                "host=h password=S3cret dbname=x",
                "host=h password=*** dbname=x",
            ),
            (
                "host=h password='S3 cret' dbname=x",
                "host=h password=*** dbname=x",
            ),
            ("host=h old_password=S3cret", "host=h old_password=S3cret"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn a_known_urls_secret_is_hidden_wherever_it_appears() {
        for url in [
            "postgres:/app:S3cret@h/db",
            "postgres://app:S3cret@h/db",
            "postgres://app:S3%63ret@h/db",
            "postgres://h/db?password=S3cret",
            "host=h password='S3cret'",
        ] {
            let echoed = format!("bad: {url}; also the password S3cret, and \"S3cret\"");
            let shown = redact_url_secrets(&echoed, url);
            assert!(!shown.contains(SECRET), "{url}: {shown}");
        }
    }

    #[test]
    fn text_without_secrets_is_unchanged() {
        let text = "no SQLite database at ./inbox.db: create it with the app's migrations";
        assert_eq!(redact_url_secrets(text, "./inbox.db"), text);
    }
}
