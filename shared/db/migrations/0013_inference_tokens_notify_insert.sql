-- A token issued notifies channel inference_tokens too, with the payload of a change
-- ('t:<lookup id>'): each inference_auth replica keeps the set of live lookup ids in memory and
-- refuses any other without a round trip (docs/inference-auth.md), so a new token must join
-- every replica's set. A replica of an earlier release drops an entry it does not have.
SET LOCAL search_path = workflow_manager;

CREATE OR REPLACE FUNCTION inference_tokens_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'inference_tokens' THEN
        IF TG_OP <> 'INSERT' THEN
            PERFORM pg_notify('inference_tokens', 't:' || OLD.lookup_id);
        END IF;
        IF TG_OP = 'INSERT'
           OR (TG_OP = 'UPDATE' AND NEW.lookup_id IS DISTINCT FROM OLD.lookup_id) THEN
            PERFORM pg_notify('inference_tokens', 't:' || NEW.lookup_id);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('inference_tokens', 'd:' || OLD.id);
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM pg_notify('inference_tokens', 'd:' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER inference_tokens_notify ON inference_tokens;
CREATE TRIGGER inference_tokens_notify
AFTER INSERT OR UPDATE OR DELETE ON inference_tokens
FOR EACH ROW EXECUTE FUNCTION inference_tokens_notify();
