-- The users of user-service. The profile is seed 000's registration form
-- (username, names, email, phone, gender, birth date) plus an id and times.
--
-- The id is chosen by the application (UUID v4 for new users; the data set's
-- fixed ids for seeded ones, which spell the user's order count and are the
-- same ids order-service's data uses), so there is no default here.
CREATE TABLE users (
    id          uuid        PRIMARY KEY,
    -- Unique: registering a taken username is a conflict (409 / ALREADY_EXISTS).
    -- The application allows only lower-case ASCII, so no citext is needed.
    username    text        NOT NULL UNIQUE,
    first_name  text        NOT NULL,
    last_name   text        NOT NULL,
    email       text        NOT NULL,
    phone       text        NOT NULL,
    -- The user.v1.Gender enum number (1 FEMALE, 2 MALE, 3 OTHER), like the
    -- order status in order-service: no text compared on the hot path.
    gender      smallint    NOT NULL CHECK (gender BETWEEN 1 AND 3),
    birth_date  date        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
