<?php
// Installs the benchmark's WordPress site and its test post: php install.php ROOT.
// Prints the post's ID. Run once per bench run, against an empty database.
$_SERVER['HTTP_HOST'] = '127.0.0.1';
$_SERVER['REQUEST_URI'] = '/';
define('WP_INSTALLING', true);
require $argv[1] . '/wp-load.php';
// wp_install() mails the administrator: no mail leaves the bench.
function wp_new_blog_notification() {}
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
$result = wp_install('php_worker bench', 'admin', 'admin@example.invalid', true, '', 'bench-password');
if (is_wp_error($result) || empty($result['user_id'])) {
    fwrite(STDERR, "wp_install failed\n");
    exit(1);
}
$paragraphs = '';
for ($i = 1; $i <= 8; $i++) {
    $paragraphs .= "<!-- wp:paragraph -->\n<p>Paragraph $i of the benchmark's post: some text to render, "
        . str_repeat('with words that fill a line, ', 6) . "and a <a href=\"/\">link</a>.</p>\n<!-- /wp:paragraph -->\n\n";
}
$post = wp_insert_post([
    'post_title' => 'A post with comments',
    'post_content' => $paragraphs,
    'post_status' => 'publish',
    'post_author' => $result['user_id'],
], true);
if (is_wp_error($post)) {
    fwrite(STDERR, "wp_insert_post failed: " . $post->get_error_message() . "\n");
    exit(1);
}
for ($i = 1; $i <= 20; $i++) {
    wp_insert_comment([
        'comment_post_ID' => $post,
        'comment_author' => "Reader $i",
        'comment_author_email' => "reader$i@example.invalid",
        'comment_content' => "Benchmark comment $i: a reader's few words about the post.",
        'comment_approved' => 1,
    ]);
}
echo $post, "\n";
