<?php
// php_worker_wait_stop() in a request: nothing tells a request to stop, so it waits its
// whole pause, unless the request's time limit (?limit=) passes first.
if (isset($_GET['limit'])) {
    set_time_limit((int) $_GET['limit']);
}
$start = microtime(true);
$stopped = php_worker_wait_stop((float) ($_GET['seconds'] ?? 0.2));
echo json_encode(['stopped' => $stopped, 'stopping' => php_worker_stopping(), 'waited' => microtime(true) - $start]);
