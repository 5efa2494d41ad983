CREATE EXTENSION snowflake_id;

-- The error a statement raises, as one row: SQLSTATE, message, detail and hint (used by the
-- files that pin refusals).
CREATE SCHEMA regress;
CREATE FUNCTION regress.error_of(call text)
RETURNS TABLE (code text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE call;
    RAISE EXCEPTION 'no error from %', call;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                            detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN NEXT;
END $$;
