-- Redriven quarantine rows are purged past the inbox's retention
-- (PurgeRedriven); this index finds them without reading the open ones.
CREATE INDEX inbox_quarantine_redriven ON inbox_quarantine (redriven_at)
    WHERE state = 'redriven';
