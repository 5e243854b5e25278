-- The I/O workload's database: 100 users, 1,000 posts, a growing post_views table.
DROP TABLE IF EXISTS post_views;
DROP TABLE IF EXISTS posts;
DROP TABLE IF EXISTS users;
CREATE TABLE users (id serial PRIMARY KEY, name text NOT NULL, email text NOT NULL);
CREATE TABLE posts (id serial PRIMARY KEY, user_id int NOT NULL REFERENCES users(id), title text NOT NULL,
                    body text NOT NULL, views int NOT NULL DEFAULT 0);
CREATE TABLE post_views (id bigserial PRIMARY KEY, post_id int NOT NULL, user_id int NOT NULL,
                         viewed_at timestamptz NOT NULL);
CREATE INDEX posts_user_id ON posts(user_id);
CREATE INDEX posts_views ON posts(views);
CREATE INDEX post_views_post_id ON post_views(post_id);
INSERT INTO users (name, email) SELECT 'user ' || i, 'user' || i || '@example.test' FROM generate_series(1, 100) i;
INSERT INTO posts (user_id, title, body) SELECT 1 + (i % 100), 'post ' || i, repeat('lorem ipsum ', 20)
  FROM generate_series(1, 1000) i;
