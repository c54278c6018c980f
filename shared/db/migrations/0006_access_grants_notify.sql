-- Every change to access_grants notifies channel access_grants with the tenant whose view it
-- changes, on commit: each apiserver replica's stream hub (on the LISTEN connection it already
-- holds for runs) re-reads that tenant's grants once and applies them to its open streams, so a
-- revocation reaches them within a second whoever wrote it (the API, or an operator in psql).
SET LOCAL search_path = workflow_manager;

CREATE FUNCTION access_grants_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM pg_notify('access_grants', OLD.tenant);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('access_grants', NEW.tenant);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER access_grants_notify
AFTER INSERT OR UPDATE OR DELETE ON access_grants
FOR EACH ROW EXECUTE FUNCTION access_grants_notify();
