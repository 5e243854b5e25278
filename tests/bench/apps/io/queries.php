<?php
// The I/O-bound request: ten SQL statements in sequence over one connection (the setup
// of the TrueAsync article): a user, their posts, a view recorded, a counter updated,
// an aggregate, a top-N and a few lookups. BENCH_PG_SLEEP (seconds) makes every
// statement also wait that long in the server, to separate waiting from CPU.

function bench_db(): PDO
{
    $dsn = getenv('BENCH_PG_DSN') ?: 'pgsql:host=127.0.0.1;port=5544;dbname=bench';
    return new PDO($dsn, 'bench', 'bench', [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_PERSISTENT => (bool) getenv('BENCH_PG_PERSISTENT'),
        PDO::ATTR_EMULATE_PREPARES => false,
    ]);
}

function bench_request(PDO $db, int $userId): array
{
    $sleep = (float) (getenv('BENCH_PG_SLEEP') ?: 0);
    // A materialized CTE runs once per statement, however the plan scans it.
    $with = $sleep > 0 ? sprintf('WITH w AS MATERIALIZED (SELECT pg_sleep(%F)) ', $sleep) : '';
    $join = $sleep > 0 ? ' CROSS JOIN w' : '';
    $from = $sleep > 0 ? ' FROM w' : '';
    $one = function (string $sql, array $args = []) use ($db) {
        $st = $db->prepare($sql);
        $st->execute($args);
        return $st->fetchAll(PDO::FETCH_ASSOC);
    };
    $out = [];
    $out['user'] = $one("{$with}SELECT id, name, email FROM users$join WHERE id = ?", [$userId])[0]['name'] ?? null;
    $posts = $one("{$with}SELECT id, title FROM posts$join WHERE user_id = ? ORDER BY id DESC LIMIT 10", [$userId]);
    $out['posts'] = count($posts);
    $postId = $posts[0]['id'] ?? 1;
    $one("{$with}INSERT INTO post_views (post_id, user_id, viewed_at) SELECT ?::int, ?::int, now()$from", [$postId, $userId]);
    $one("{$with}UPDATE posts SET views = views + 1" . ($sleep > 0 ? ' FROM w' : '') . " WHERE posts.id = ? RETURNING views", [$postId]);
    $out['views'] = (int) $one("{$with}SELECT count(*) AS n FROM post_views$join WHERE post_id = ?", [$postId])[0]['n'];
    $out['top'] = count($one("{$with}SELECT id, views FROM posts$join ORDER BY views DESC LIMIT 5"));
    $out['authors'] = (int) $one("{$with}SELECT count(DISTINCT user_id) AS n FROM posts$join")[0]['n'];
    $out['recent'] = count($one("{$with}SELECT post_id FROM post_views$join ORDER BY post_views.id DESC LIMIT 10"));
    $out['title'] = $one("{$with}SELECT title FROM posts$join WHERE posts.id = ?", [$postId])[0]['title'] ?? null;
    $out['total_users'] = (int) $one("{$with}SELECT count(*) AS n FROM users$join")[0]['n'];
    $out['queries'] = 10;
    return $out;
}
