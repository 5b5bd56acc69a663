-- Where an owner runs, beyond its host name (protocol §4.11): the machine id and
-- the boot id. Host names repeat (cloned machines, containers); a lock file proves
-- an owner dead only within the boot that holds it. Rows written before this
-- migration have neither, and are never proven dead by their lock.
ALTER TABLE owner ADD COLUMN machine_id TEXT;
ALTER TABLE owner ADD COLUMN boot_id TEXT;
