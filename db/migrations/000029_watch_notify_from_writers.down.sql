CREATE FUNCTION repository_lock_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('repolock_events', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER repository_lock_events_notify
    AFTER INSERT ON repository_lock_events
    FOR EACH STATEMENT EXECUTE FUNCTION repository_lock_events_notify();
