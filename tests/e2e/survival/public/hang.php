<?php
require __DIR__ . '/../hang.php';
if (isset($_GET['limit'])) {
    set_time_limit((int) $_GET['limit']); // counts from here, as in php-fpm
}
if (isset($_GET['flush'])) {
    echo "partial\n";
    flush(); // the headers and this line leave before the call blocks
}
echo hang($_GET['kind'] ?? '', $_GET['target'] ?? '');
