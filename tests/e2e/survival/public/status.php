<?php
$s = opcache_get_status(false);
header('Content-Type: application/json');
echo json_encode($s === false ? false : ['enabled' => $s['opcache_enabled'], 'statistics' => $s['opcache_statistics'],
    'memory' => $s['memory_usage'], 'jit' => (bool)($s['jit']['on'] ?? false)]);
