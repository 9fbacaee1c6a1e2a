-- pgsched schema, version 27: a stored schedule's calendar. `calendar` names a calendar the
-- scheduler registers in code (`Scheduler.calendar(name, Calendar(...))`); NULL: none.
-- `on_excluded` says what a plan on a day it excludes does. Both are part of the schedule's
-- spec: a put that changes them computes its next plan again. Adding columns with a constant
-- default changes the catalog only (no rewrite of the table); replicas of the previous
-- version do not read them, so put a schedule with a calendar once every replica runs this
-- version.
ALTER TABLE {schema}.schedules
    ADD COLUMN IF NOT EXISTS calendar text,
    ADD COLUMN IF NOT EXISTS on_excluded text NOT NULL DEFAULT 'skip'
        CHECK (on_excluded IN ('skip', 'next_working_day', 'previous_working_day'));
