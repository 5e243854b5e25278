<?php
header('Content-Type: application/json');
echo json_encode([
    'extensions' => array_map('strtolower', get_loaded_extensions()),
    'opcache' => function_exists('opcache_get_status') && opcache_get_status(false) !== false,
    'gd' => function_exists('gd_info') ? gd_info() : null,
    'mysql_socket' => ini_get('mysqli.default_socket'),
    'pdo_drivers' => PDO::getAvailableDrivers(),
    'ini_files' => [php_ini_loaded_file(), php_ini_scanned_files()],
    'errors' => [ini_get('display_errors'), ini_get('log_errors')],
]);
