<?php
// Worker executor: serves each request by running the fixture of public/ that its path
// names, so the classic-mode fixtures also run in worker mode.
$public = __DIR__ . '/public';
$handler = function () use ($public) {
    $path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH) ?: '/';
    $end = stripos($path, '.php');
    $script = $end === false ? '/index.php' : substr($path, 0, $end + 4);
    $file = realpath($public . $script);
    if ($file === false || !str_starts_with($file, $public . '/')) {
        http_response_code(404);
        echo "no fixture for $path";
        return;
    }
    chdir(dirname($file));
    require $file;
};
while (frankenphp_handle_request($handler)) {
}
