"""The chat page and the engine view in a real browser (headless Chromium + Selenium).

One succ server for the module (answers are predictable: after byte i comes byte i+1),
slowed a little per engine step so a person -- and these tests -- can watch a stream grow.
"""
from __future__ import annotations

import threading

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from engine.api import EngineConfig
from tests.e2e.helpers import chat_body, metrics, post, running_server, two_chat_config

WAIT_S = 20
STEP_DELAY_S = 0.01
USED = 'tl_engine_kv_blocks{state="used"}'
EVIL = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def server(succ_model_dir):
    engine = EngineConfig(num_kv_blocks=96, block_size=16)
    with running_server(succ_model_dir, step_delay_s=STEP_DELAY_S, engine=engine) as handle:
        yield handle


@pytest.fixture
def chat(browser, server):
    browser.get(server.http_url + "/")
    until(browser, lambda d: d.find_element(By.ID, "model").text == "succ")
    return browser


def until(driver, condition, timeout_s: float = WAIT_S):
    return WebDriverWait(driver, timeout_s, poll_frequency=0.02).until(condition)


def fill(driver, field_id: str, value: str) -> None:
    field = driver.find_element(By.ID, field_id)
    field.clear()
    field.send_keys(value)


def answers(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")


def ask(driver, text: str) -> str:
    """Send `text` with Enter and return the finished answer's text."""
    count = len(answers(driver))
    driver.find_element(By.ID, "input").send_keys(text, Keys.ENTER)
    done = until(driver, lambda d: len(answers(d)) > count
                 and answers(d)[-1].get_attribute("data-done") == "1" and answers(d)[-1])
    return done.find_element(By.CLASS_NAME, "text").text


def test_a_streamed_answer_grows_and_stop_frees_its_blocks(chat, server, shot):
    fill(chat, "temperature", "0")
    fill(chat, "max-tokens", "1000")
    box = chat.find_element(By.ID, "input")
    box.send_keys("x", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "a")        # Shift+Enter: a newline
    assert box.get_attribute("value") == "x\na" and not answers(chat)
    box.send_keys(Keys.ENTER)                                          # Enter: send
    text = lambda: answers(chat)[0].find_element(By.CLASS_NAME, "text").text
    lengths = [len(until(chat, lambda d: len(text()) >= 3 and text()))]
    lengths.append(len(until(chat, lambda d: len(text()) > lengths[0] + 5 and text())))
    assert text().startswith("bcdefgh")                                # succ: a -> b c d ...
    assert metrics(server)[USED] > 0
    shot(chat, "chat-streaming")
    chat.find_element(By.ID, "stop").click()
    answer = answers(chat)[0]
    until(chat, lambda d: answer.get_attribute("data-done") == "1")
    assert answer.get_attribute("data-finish") == "stopped"
    assert len(text()) < 1000 and "TTFT" in answer.find_element(By.CLASS_NAME, "meta").text
    until(chat, lambda d: metrics(server)[USED] == 0)                 # the server let go
    assert chat.find_element(By.ID, "send").is_enabled()


def test_a_seed_gives_the_same_answer_twice_and_usage_is_shown(chat, shot):
    fill(chat, "temperature", "1")
    fill(chat, "max-tokens", "24")
    fill(chat, "seed", "7")
    first = ask(chat, "a")
    meta = answers(chat)[-1].find_element(By.CLASS_NAME, "meta").text
    assert "1 prompt + 24 completion tokens" in meta and "TTFT" in meta and "tok/s" in meta
    chat.find_element(By.ID, "clear").click()
    assert not answers(chat)
    second = ask(chat, "a")
    fill(chat, "seed", "8")
    chat.find_element(By.ID, "clear").click()
    other = ask(chat, "a")
    assert answers(chat)[-1].get_attribute("data-tokens") == "24"
    assert first and first == second and other != first
    shot(chat, "chat-seeded")


def test_text_from_the_user_or_the_model_is_never_html(chat, shot):
    fill(chat, "max-tokens", "2")
    ask(chat, EVIL)                                                   # the user's text
    user = chat.find_elements(By.CSS_SELECTOR, "#log .msg.user .text")[-1]
    assert user.text == EVIL
    # The model's text: a stubbed stream answers with markup (succ cannot spell it).
    chat.execute_script("""
        const evil = arguments[0], real = window.fetch;
        window.fetch = (url, init) => {
          if (!String(url).endsWith('/v1/chat/completions')) return real(url, init);
          const chunk = {choices: [{index: 0, delta: {content: evil}, finish_reason: 'stop'}]};
          const body = 'data: ' + JSON.stringify(chunk) + '\\n\\ndata: [DONE]\\n\\n';
          return Promise.resolve(new Response(body, {headers: {'Content-Type': 'text/event-stream'}}));
        };""", EVIL)
    assert ask(chat, "draw") == EVIL
    assert not chat.find_elements(By.CSS_SELECTOR, "#log img")
    assert chat.execute_script("return window.__xss") is None
    shot(chat, "chat-xss-as-text")


def test_the_api_key_stays_in_the_session_and_is_sent_as_bearer(chat):
    chat.execute_script("""
        window.__auth = [];
        const real = window.fetch;
        window.fetch = (url, init) => {
          window.__auth.push((init && init.headers && init.headers.Authorization) || null);
          return real(url, init);
        };""")
    fill(chat, "api-key", "sk-test-123")
    chat.find_element(By.ID, "max-tokens").click()                    # leave the field: change
    fill(chat, "max-tokens", "2")
    ask(chat, "a")
    sent = chat.execute_script("return window.__auth")
    assert sent and set(sent) == {"Bearer sk-test-123"}
    stored = chat.execute_script("return [sessionStorage.getItem('tlserve.api_key'),"
                                 " localStorage.length, document.cookie]")
    assert stored == ["sk-test-123", 0, ""]
    chat.get(chat.current_url)                                        # a reload keeps it
    assert until(chat, lambda d: d.find_element(By.ID, "api-key").get_attribute("value"))
    fill(chat, "api-key", "")
    chat.find_element(By.ID, "max-tokens").click()
    assert chat.execute_script("return sessionStorage.getItem('tlserve.api_key')") is None


def test_a_failed_turn_stays_on_screen_but_is_left_out_of_the_next_request(chat, shot):
    """The server's own count of the next prompt says what it carried: the succ template
    joins the contents, one token per byte, so "a" + "bc" + "q" is 4 tokens, and 8 if the
    refused "zzzz" were sent again."""
    fill(chat, "temperature", "0")
    fill(chat, "max-tokens", "2")
    assert ask(chat, "a") == "bc"
    fill(chat, "temperature", "5")                                    # the server says 400
    ask(chat, "zzzz")
    failed = answers(chat)[-1]
    assert failed.get_attribute("data-finish") == "error"
    assert "HTTP 400" in failed.find_element(By.CLASS_NAME, "error").text
    fill(chat, "temperature", "0")
    assert ask(chat, "q") == "rs"
    meta = answers(chat)[-1].find_element(By.CLASS_NAME, "meta").text
    assert "4 prompt + 2 completion tokens" in meta, meta
    asked = chat.find_elements(By.CSS_SELECTOR, "#log .msg.user")[1]
    assert asked.text == "zzzz" and asked.get_attribute("data-failed") == "1"   # marked
    shot(chat, "chat-failed-turn")


def test_clear_during_a_stream_starts_an_empty_conversation(chat):
    fill(chat, "temperature", "0")
    fill(chat, "max-tokens", "1000")
    chat.find_element(By.ID, "input").send_keys("a", Keys.ENTER)
    until(chat, lambda d: answers(d) and len(answers(d)[0].text) >= 3)   # streaming
    chat.find_element(By.ID, "clear").click()                          # stops it and clears
    until(chat, lambda d: d.find_element(By.ID, "send").is_enabled())  # the stream ended
    fill(chat, "max-tokens", "2")
    assert ask(chat, "a") == "bc"
    meta = answers(chat)[-1].find_element(By.CLASS_NAME, "meta").text
    assert "1 prompt + 2 completion tokens" in meta, meta             # the cut answer is gone


@pytest.mark.parametrize("width_px", [360, 375, 420])
def test_a_phone_wide_window_gets_a_wide_chat_and_folded_settings(chat, shot, width_px):
    chat.set_window_size(width_px, 700)
    try:
        until(chat, lambda d: d.execute_script("return window.innerWidth") <= width_px)
        settings, toggle = (chat.find_element(By.ID, name) for name in ("settings",
                                                                         "settings-toggle"))
        assert not settings.is_displayed() and toggle.is_displayed()
        for name in ("chat", "input"):
            assert chat.find_element(By.ID, name).rect["width"] >= 300, name
        assert chat.execute_script(                                   # nothing runs off the side
            "return document.documentElement.scrollWidth <= window.innerWidth")
        if width_px == 375:
            shot(chat, "chat-375")
        toggle.click()
        assert settings.is_displayed() and toggle.get_attribute("aria-expanded") == "true"
        if width_px == 375:
            shot(chat, "chat-375-settings")
        fill(chat, "max-tokens", "2")                                 # reachable once unfolded
        fill(chat, "temperature", "0")
        toggle.click()
        assert not settings.is_displayed()
        assert ask(chat, "a") == "bc"                                 # the setting took effect
    finally:
        chat.set_window_size(1280, 900)
    until(chat, lambda d: settings.is_displayed() and not toggle.is_displayed())


def test_the_engine_view_shows_blocks_used_while_a_request_runs(browser, server, shot):
    browser.get(server.health_url + "/engine")
    cells = lambda state: len(browser.find_elements(By.CSS_SELECTOR, f"#grid .cell.{state}"))
    until(browser, lambda d: cells("f") + cells("c") == 96 and cells("u") == 0)
    body = chat_body("q" * 40, max_tokens=150, temperature=0)
    worker = threading.Thread(target=post, args=(server, "/v1/chat/completions", body))
    worker.start()
    until(browser, lambda d: cells("u") >= 3)                          # 40 + tokens: 3+ blocks
    rows = browser.execute_script(       # read at once: each snapshot redraws the table
        "return [...document.querySelectorAll('#running tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))")
    assert len(rows) == 1 and rows[0][2:4] == ["base", "40"]      # no adapter; 40 prompt tokens
    shot(browser, "engine-busy")
    worker.join(WAIT_S)
    until(browser, lambda d: cells("u") == 0 and cells("c") >= 2)      # back, prompt cached
    assert not browser.find_elements(By.CSS_SELECTOR, "#running tr")
    assert browser.find_elements(By.CSS_SELECTOR, "#radix li")
    shot(browser, "engine-idle")


def test_the_engine_view_offers_each_chat_engine_of_a_two_model_server(browser, succ_model_dir,
                                                                       tiny_llama_dir, shot):
    """Two chat models: the page lists both engines and draws the one chosen (succ's pool
    of 96 blocks first, then the tiny Llama's 40)."""
    from selenium.webdriver.support.ui import Select
    from server.serve import spawn
    cfg = two_chat_config(succ_model_dir, tiny_llama_dir, first="num_kv_blocks = 96",
                          second="num_kv_blocks = 40")
    handle = spawn(cfg)
    try:
        browser.get(handle.health_url + "/engine")
        cells = lambda: len(browser.find_elements(By.CSS_SELECTOR, "#grid .cell"))
        until(browser, lambda d: cells() == 96)
        choice = Select(browser.find_element(By.ID, "engine-model"))
        assert [o.text for o in choice.options] == ["succ", "tiny"]
        choice.select_by_visible_text("tiny")
        until(browser, lambda d: cells() == 40)
        shot(browser, "engine-two-models")
    finally:
        handle.stop()
