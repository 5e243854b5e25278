<?php
require __DIR__ . '/../hang.php';
if (isset($_GET['limit'])) {
    set_time_limit((int) $_GET['limit']); // counts from here, as in php-fpm
}
echo hang($_GET['kind'] ?? '', $_GET['target'] ?? '');
