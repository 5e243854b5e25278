<?php
// Hello world in worker mode; ?large=<MB> answers that many megabytes in one echo, the
// way a framework sends a large rendered page or JSON document.
$handler = static function () {
    if (isset($_GET['large'])) {
        echo str_repeat('x', (int) $_GET['large'] << 20);
        return;
    }
    echo 'Hello, world!';
};
while (frankenphp_handle_request($handler)) {
}
