//! The schema versions a consumer accepts.

/// The schema versions a consumer accepts, per event type.
#[derive(Debug, Clone, Default)]
pub struct SchemaVersions;
