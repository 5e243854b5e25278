<?php
// Classic mode: fails where ?phase= says (script or shutdown) with ?kind=.
require __DIR__ . '/../fault.php';

$kind = $_GET['kind'] ?? '';
switch ($_GET['phase'] ?? '') {
    case 'script':
        echo "before the fault\n";
        fault($kind);
        break;
    case 'shutdown':
        ob_start(function (string $buffer) use ($kind) {
            fault($kind);
            return $buffer;
        });
        break;
    case 'shutdown-function':
        register_shutdown_function(function () use ($kind) {
            fault($kind);
        });
        break;
}
echo 'classic ok';
