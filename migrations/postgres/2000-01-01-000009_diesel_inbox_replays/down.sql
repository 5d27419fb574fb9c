-- Drops the replay records, their transitions and their notes.
DROP TABLE IF EXISTS diesel_inbox_replay_notes;
DROP TABLE IF EXISTS diesel_inbox_replay_transitions;
DROP TABLE IF EXISTS diesel_inbox_replays;
