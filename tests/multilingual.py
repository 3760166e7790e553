"""Small multilingual text the language tests write themselves: Korean, Chinese, Japanese,
accented Latin (French, Vietnamese, German) and English sentences from fixed word lists."""

import os

import numpy as np

from tests import test_data_common

WORDS = {
    "ko": "데비안은 자유 운영체제입니다 한국어 문장을 학습합니다 모델이 데이터를 읽고 "
    "컴퓨터에서 프로그램을 실행합니다 우리는 오늘 서울에서 새로운 책을 샀습니다 "
    "날씨가 좋아서 공원에 갔다".split(),
    "zh": "数据 模型 训练 语言 文本 我们 使用 计算机 学习 开源 软件 系统 中文 处理 自然 网络 "
    "程序 研究 方法 结果 因为 所以 可以 非常 重要 的 是 在 了 和 北京 今天 天气 很好".split(),
    "ja": "私 は 日本語 の テキスト を 書きます データ モデル 学習 します 東京 に 行きます "
    "新しい コンピュータ で が ガラス ぎんこう 天気 きょう 読みました プログラム 人 山 川 "
    "本 水 日 月 花 見る 行く 来る する いる ある これ それ 何 今日 明日 猫 犬 雨 雪 空 海 "
    "町 駅 車 道 店 家 学校 先生 友達 から まで と も や ね よ".split(),
    "latin": "café crème à été déjà naïve Tiếng Việt có dấu Größe Straße über Ärger "
    "garçon señor año cœur élève français người học tiếng".split(),
    "en": "the model reads text and learns which words come next in every sentence of "
    "the corpus we wrote for this test".split(),
}
SPACED = {"ko", "latin", "en"}


def sentence(lang: str, rng: np.random.Generator) -> str:
    """One sentence of 6 to 14 words of `lang`, spaced as the language writes them."""
    words = WORDS[lang]
    chosen = [words[i] for i in rng.integers(len(words), size=int(rng.integers(6, 15)))]
    if lang in SPACED:
        return " ".join(chosen) + "."
    return "".join(chosen) + ("。" if lang in ("zh", "ja") else ".")


def documents(langs: tuple[str, ...], count: int, seed: int = 0) -> list[list[str]]:
    """`count` documents of 3 to 8 sentences, each document in one of `langs` (cycled)."""
    rng = np.random.default_rng(seed)
    return [
        [sentence(langs[d % len(langs)], rng) for _ in range(int(rng.integers(3, 9)))]
        for d in range(count)
    ]


def text_file(name: str, langs: tuple[str, ...], count: int) -> str:
    """The documents written as a corpus file (one sentence per line) in the test scratch."""
    path = os.path.join(test_data_common.scratch("languages"), f"{name}.txt")
    return test_data_common.write_documents(path, documents(langs, count))
