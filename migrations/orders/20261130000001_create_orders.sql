-- The orders of order-service. One row per order; the shipping address is
-- flattened into columns because it is always read with the order and never
-- shared between rows.
--
-- Money is bigint minor units (cents): integers never round, and they are what
-- the typed v2 API sends. The status is a smallint holding the proto enum
-- number, so no text is compared or converted on the hot path.
CREATE TABLE orders (
    id                uuid        PRIMARY KEY,
    user_id           uuid        NOT NULL,
    product_id        uuid        NOT NULL,
    product_name      text        NOT NULL,
    quantity          integer     NOT NULL CHECK (quantity > 0),
    unit_price_minor  bigint      NOT NULL CHECK (unit_price_minor >= 0),
    discount_minor    bigint      NOT NULL CHECK (discount_minor >= 0),
    total_minor       bigint      NOT NULL,
    currency          text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status            smallint    NOT NULL CHECK (status BETWEEN 1 AND 5),
    gift              boolean     NOT NULL,
    ship_line1        text        NOT NULL,
    -- NULL: no second line (absent differs from empty).
    ship_line2        text,
    ship_city         text        NOT NULL,
    ship_postal_code  text        NOT NULL,
    ship_country_code text        NOT NULL,
    -- NULL: none given; '': given and blank.
    note              text,
    coupon_code       text,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);

-- Every read is "one user's orders, by id, after a cursor": this index answers
-- it in order without a sort.
CREATE INDEX orders_user_id_id ON orders (user_id, id);

-- Idempotency keys of CreateOrder. The key row and the order are written in one
-- transaction, so a retry finds either both or neither. The fingerprint tells
-- a retry from a different request that reuses a key.
CREATE TABLE idempotency_keys (
    key         text        PRIMARY KEY,
    order_id    uuid        NOT NULL REFERENCES orders (id),
    fingerprint text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
