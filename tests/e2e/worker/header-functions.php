<?php
while (frankenphp_handle_request(function () {
    header('X-Answer: 42');
    header('Content-Type: application/json');
    echo json_encode([
        'request' => frankenphp_request_headers(),
        'getallheaders' => getallheaders(),
        'apache_request_headers' => apache_request_headers(),
        'response' => frankenphp_response_headers(),
        'apache_response_headers' => apache_response_headers(),
    ]);
})) {
}
