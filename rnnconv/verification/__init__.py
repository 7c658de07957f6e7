"""Verification: a written file run against its source (`run`), the engines that run a blob, the diagnosis of a
mismatch, the audit of a deployed model against its checkpoint, `identify`, and verify's reports (JUnit, plot)."""
