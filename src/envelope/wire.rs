//! An envelope as a broker message: its fields as headers, its payload as the body.

/// A broker message: headers in order, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The payload's bytes.
    pub body: Vec<u8>,
}
