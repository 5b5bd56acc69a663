//! Steward's terminal interface: ratatui views over the engine's read models.
