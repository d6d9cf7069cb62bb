-- Auto mode (SPEC §10): one row per supervised loop, with seed 002's columns plus the whole
-- status object as JSON; and the supervision journal (every signal, verdict, keystroke, wait,
-- restart and stop).
CREATE TABLE task_auto (
  session_name TEXT PRIMARY KEY,
  task_dir TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL DEFAULT 'running',
  max_iterations INTEGER DEFAULT 20,
  timeout_minutes REAL DEFAULT 30,
  iteration_count INTEGER DEFAULT 0,
  recovery_count_step INTEGER DEFAULT 0,
  recovery_count_total INTEGER DEFAULT 0,
  last_capture_hash TEXT DEFAULT '',
  stall_count INTEGER DEFAULT 0,
  quota_wait_since TEXT DEFAULT '',
  started_at TEXT,
  last_signal_at TEXT,
  loop_id TEXT NOT NULL,
  state TEXT NOT NULL
);

CREATE TABLE auto_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  loop_id TEXT NOT NULL,
  session_name TEXT NOT NULL,
  at TEXT NOT NULL,
  kind TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX auto_log_by_loop ON auto_log (loop_id, id);
