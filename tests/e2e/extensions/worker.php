<?php
// The extensions app's worker: each route calls extensions from a booted worker thread.
// Every answer is JSON and says which PHP thread served it, and which boot of the script.
require_once __DIR__ . '/../../extensions/checks.php';
require_once __DIR__ . '/thread.php';

$boot = bin2hex(random_bytes(6));
$memcached = null; // one connection per thread, kept across requests as apps keep them

$routes = [
    '/worker/checks' => static fn () => ['checks' => php_worker_extension_checks()],
    // APCu: store a value naming this thread, fetch it, or just say which boot this is.
    '/worker/apcu' => static fn () => match ($_GET['op'] ?? '') {
        'store' => ['ok' => apcu_store((string) $_GET['k'], ['from' => thread_id()])],
        'fetch' => ['value' => apcu_fetch((string) $_GET['k'])],
        default => [],
    },
    // Resizes a ?size= square image to half its width.
    '/worker/resize' => static function () {
        $size = (int) ($_GET['size'] ?? 64);
        $image = new Imagick();
        $image->newPseudoImage($size, $size, 'plasma:fractal');
        $image->setImageFormat('jpeg');
        $image->resizeImage(intdiv($size, 2), intdiv($size, 2), Imagick::FILTER_LANCZOS, 1);
        return ['width' => $image->getImageWidth(), 'threads_limit' => Imagick::getResourceLimit(Imagick::RESOURCETYPE_THREAD)];
    },
    // memcached: a key of this request's own, and one counter every request increments.
    '/worker/memcached' => static function () use (&$memcached) {
        if ($memcached === null) {
            $memcached = new Memcached();
            $memcached->addServer('127.0.0.1', (int) $_GET['port']);
            $memcached->setOption(Memcached::OPT_SERIALIZER, Memcached::SERIALIZER_IGBINARY);
        }
        $prefix = (string) $_GET['prefix'];
        $own = "$prefix-" . $_GET['i'];
        $value = ['i' => (string) $_GET['i'], 'thread' => thread_id(), 'pad' => str_repeat('x', 1000)];
        if ($_GET['i'] === 'init') { // before the concurrent increments: memcached's
            // increment-with-initial-value is not atomic against another one creating the key
            return ['set' => $memcached->set("$prefix-counter", 0, 60)];
        }
        $stored = $memcached->set($own, $value, 60);
        $counter = $memcached->increment("$prefix-counter");
        return ['own' => $stored && $memcached->get($own) == $value, 'counter' => $counter,
            'result' => $memcached->getResultMessage()];
    },
];

$handler = static function () use ($routes, $boot): void {
    header('Content-Type: application/json');
    $path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
    $route = $routes[$path] ?? null;
    if ($route === null) {
        http_response_code(404);
        echo json_encode(['error' => "no route $path"]);
        return;
    }
    echo json_encode($route() + ['thread' => thread_id(), 'boot' => $boot]);
};

while (frankenphp_handle_request($handler)) {
}
