<?php
while (frankenphp_handle_request(function () {
    header('Link: </style.css>; rel=preload; as=style');
    $sent = headers_send(103);
    usleep(300000);
    header('Content-Type: text/plain');
    echo 'final after hints:', $sent;
})) {
}
