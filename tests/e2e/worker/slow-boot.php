<?php
// Boots for ?PHP_WORKER_BOOT_SECONDS (env) seconds before it serves.
sleep((int) (getenv('BOOT_SECONDS') ?: 3));
while (frankenphp_handle_request(function () {
    echo 'booted';
})) {
}
