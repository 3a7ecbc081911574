-- The ledger book's table (postgres_ledger_book). {table} is the schema-qualified name the book
-- was given (default ledger_lines). One row per line of a posting; the primary key
-- (posting_key, line) is what makes a replay write nothing (insert ... on conflict do nothing)
-- and serves lines_of(key) (an index range scan on its leading column).
CREATE TABLE IF NOT EXISTS {table} (
    posting_key text COLLATE "C" NOT NULL,
    line        integer NOT NULL CHECK (line >= 0),
    account     text NOT NULL CHECK (account <> ''),
    minor       bigint NOT NULL,
    currency    char(3) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (posting_key, line)
);
