<?php
// Each action leaves state behind that the next request must not see.
$served = 0;
while (frankenphp_handle_request(function () use (&$served) {
    $served++;
    $action = $_GET['action'] ?? '';
    $before = [
        'session_status' => session_status(),
        'session_id' => session_id(),
        'has_session_global' => isset($_SESSION),
        'get' => $_GET,
        'post' => $_POST,
        'cookie' => $_COOKIE,
        'files' => array_keys($_FILES),
        'request' => $_REQUEST,
        'server_probe' => $_SERVER['HTTP_X_PROBE'] ?? null,
        'input' => file_get_contents('php://input'),
        'code' => http_response_code(),
        'ob_level' => ob_get_level(),
        'headers' => headers_list(),
    ];
    switch ($action) {
        case 'session':
            session_start();
            $_SESSION['secret'] = $_GET['value'] ?? 'x';
            break;
        case 'dirty':
            header('X-Leaky: yes');
            http_response_code(299);
            ob_start();
            echo "buffered\n";
            break;
        case 'upload':
            foreach ($_FILES as $f) {
                file_put_contents($_GET['record'], $f['tmp_name']);
            }
            break;
    }
    header('Content-Type: application/json');
    echo json_encode(['served' => $served, 'before' => $before], JSON_UNESCAPED_SLASHES);
})) {
}
